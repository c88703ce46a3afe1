"""An independent reference for edges: plain torch hooks on the native HF modules.

One receiver of one text reads its own copy of the residual stream: the text runs as two
rows, the second gets ``added`` at the receiver's input (its layer input for a query, key
or value; the MLP's input residual; the final residual for the logits), and the receiver's
query, key or value (an HF attention function, no nnsight) or MLP output is copied from
the second row into the first. A sender's change is measured the same way: the site
tensors of two plain forward passes.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from tests.reference import _prob_zero_attention
from tests.reference_sites import hooked
from tests.tolerance import rounding_bound

SPLICE: dict[int, tuple[str, int]] = {}  # layer -> (q|k|v, head or group)


def _splice_attention(module, query, key, value, attention_mask, **kwargs):
    """Eager attention whose row 0 takes one head's (or group's) q, k or v from row 1."""
    spliced = SPLICE.get(module.layer_idx)
    if spliced is not None:
        kind, unit = spliced
        tensors = {"q": query, "k": key, "v": value}
        t = tensors[kind].clone()
        t[0, unit] = t[1, unit]
        tensors[kind] = t
        query, key, value = tensors["q"], tensors["k"], tensors["v"]
    return _prob_zero_attention(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register("bindscope_splice", _splice_attention)
AttentionMaskInterface.register("bindscope_splice", eager_mask)


def _second_row(added: torch.Tensor):
    def edit(x):
        return x + torch.stack([torch.zeros_like(added), added]).to(x.dtype)

    return edit


def _copy_second_row(y):
    return torch.stack([y[1], y[1]])


def receiver_logits(model, ids: list[int], receiver: str, added: torch.Tensor) -> torch.Tensor:
    """Last-position logits ``[V]`` of ``ids`` with ``receiver`` reading ``x + added``.

    ``receiver`` is named as in ``EdgeGraph.receivers``; ``added`` is ``[n, d]``.
    """
    hf, family = model.hf, model.family
    inputs = torch.tensor([ids, ids])
    with contextlib.ExitStack() as stack:
        if receiver == "logits":
            last = model.n_layers - 1
            stack.enter_context(hooked(hf, family, "resid_post", last, edit=_second_row(added)))
            stack.enter_context(hooked(hf, family, "resid_post", last, edit=_copy_second_row))
        elif receiver.startswith("m"):
            layer = int(receiver[1:])
            reads = "resid_pre" if "resid_mid" not in model.sites else "resid_mid"
            stack.enter_context(hooked(hf, family, reads, layer, edit=_second_row(added)))
            stack.enter_context(hooked(hf, family, "mlp_out", layer, edit=_copy_second_row))
        else:
            layer, rest = receiver[1:].split(".", 1)
            SPLICE.clear()
            SPLICE[int(layer)] = (rest[-2], int(rest[1:].split("<")[0]))
            previous = hf.config._attn_implementation
            hf.set_attn_implementation("bindscope_splice")
            stack.callback(hf.set_attn_implementation, previous)
            stack.callback(SPLICE.clear)
            stack.enter_context(
                hooked(hf, family, "resid_pre", int(layer), edit=_second_row(added))
            )
        return hf(inputs).logits[0, -1]


def read_input(model, ids: list[int], receiver: str) -> torch.Tensor:
    """``[n, d]``: the residual ``receiver`` reads on ``ids`` (one plain forward pass)."""
    if receiver == "logits":
        site, layer = "resid_post", model.n_layers - 1
    elif receiver.startswith("m"):
        site, layer = (
            ("resid_mid" if "resid_mid" in model.sites else "resid_pre"),
            int(receiver[1:]),
        )
    else:
        site, layer = "resid_pre", int(receiver[1:].split(".")[0])
    found: list[torch.Tensor] = []
    with hooked(model.hf, model.family, site, layer, into=found), torch.no_grad():
        model.hf(torch.tensor([ids]))
    return found[0][0]


def sender_delta(model, clean: list[int], corrupted: list[int], sender: str) -> torch.Tensor:
    """``[n, d]``: the sender's corrupted minus clean output into the residual stream.

    A head's output is its layer's ``attn_out`` with only that head's slice of the output
    projection's input taken from the corrupted run.
    """
    hf, family = model.hf, model.family

    def run(ids, site, layer, edit=None, into_site=None):
        found: list[torch.Tensor] = []
        with contextlib.ExitStack() as stack, torch.no_grad():
            if edit is not None:
                stack.enter_context(hooked(hf, family, "head_out", layer, edit=edit))
            stack.enter_context(hooked(hf, family, into_site or site, layer, into=found))
            hf(torch.tensor([ids]))
        return found[0][0]

    if sender == "embed":
        return run(corrupted, "resid_pre", 0) - run(clean, "resid_pre", 0)
    if sender.startswith("m"):
        layer = int(sender[1:])
        return run(corrupted, "mlp_out", layer) - run(clean, "mlp_out", layer)
    layer, head = (int(x) for x in sender[1:].split(".h"))
    z_cor = run(corrupted, "head_out", layer)
    hd = model.head_dim

    def swap(z):
        z = z.clone()
        z[..., head * hd : (head + 1) * hd] = z_cor[..., head * hd : (head + 1) * hd]
        return z

    swapped = run(clean, "attn_out", layer, edit=swap)
    return swapped - run(clean, "attn_out", layer)


def random_pairs(model, *, strong: bool = False) -> tuple[list[list[int]], list[list[int]]]:
    """Two pairs of random token ids (lengths 7 and 5: the batch is left-padded).

    The corrupted texts differ at two and one positions; ``strong``: texts of 11 and 9
    tokens that differ at every position but the first and the last, so that every edge
    carries a large change (the negative controls' margins grow with it).
    """
    generator = torch.Generator().manual_seed(0)
    lengths = (11, 9) if strong else (7, 5)
    clean = [torch.randint(3, 700, (n,), generator=generator).tolist() for n in lengths]
    corrupted = [list(c) for c in clean]
    corrupted[0][2], corrupted[0][4], corrupted[1][1] = 50, 60, 70
    if strong:
        for k in corrupted:
            k[1:-1] = torch.randint(3, 700, (len(k) - 2,), generator=generator).tolist()
    if model.prepend_bos:  # the same first token in both
        for c, k in zip(clean, corrupted):
            k[0] = c[0]
    return clean, corrupted


def one_edge_of_each_kind(model) -> list[tuple[str, str]]:
    """embed -> q, head -> k, MLP -> v, head -> MLP, MLP -> MLP, head -> logits."""
    last = model.n_layers - 1
    return [
        ("embed", "a0.h1<q>"),
        ("a0.h2", f"a1.g{model.n_kv_heads - 1}<k>"),
        ("m0", "a1.g0<v>"),
        ("a0.h0", "m1"),
        ("m0", "m2"),
        (f"a{last}.h3", "logits"),
    ]


def other_sender(sender: str) -> str:
    """Another sender: an MLP for the embedding, a head for an MLP, the next head."""
    if sender == "embed":
        return "m0"
    if sender.startswith("m"):
        return "a0.h1"
    layer, head = sender[1:].split(".h")
    return f"a{layer}.h{(int(head) + 1) % 4}"


def other_receiver(model, receiver: str) -> str:
    """Another receiver: a query for a key/value, a key for a query, another MLP or head."""
    if receiver == "logits":
        return f"m{model.n_layers - 1}"
    if receiver.startswith("m"):
        return f"a{receiver[1:]}.h0<q>"
    layer, rest = receiver[1:].split(".", 1)
    if rest.endswith("<q>"):
        return f"a{layer}.g0<k>"
    return f"a{layer}.h1<q>"


def edge_bound(magnitude: float, model) -> float:
    """Rounding of one value of size ``magnitude`` through the model's layers (and the
    logits) of dot products ``d_model`` wide (tests/tolerance.py), twice: ours and the
    reference's orderings."""
    return 2 * rounding_bound(magnitude=magnitude, width=model.d_model, depth=model.n_layers + 1)
