"""GradDrop scores equal a plain-torch computation on the HF model, on several families.

Gemma 2 among them: the reference differentiates the logits HF returns, after the final
soft-capping, so an estimate that skipped the cap fails (by 0.29 against a 5e-5 bound).

The reference runs the HF model without nnsight: forward pre-hooks keep each output
projection's input (the head outputs), forward hooks keep each layer's attention and MLP
outputs, and for every layer ``l`` ``torch.autograd.grad`` runs with tensor hooks that
stop the gradient at layer ``l``'s two outputs. Zero-ablation's estimate is ``-z . g``
per head; the score is the mean |estimate| over the ``L - 1`` layers.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.interventions import Zero
from bindscope.runners.attribution_patching import (
    TargetLogprob,
    all_heads,
    head_attribution_patching,
)
from tests.conftest import PROMPTS, build_tiny
from tests.reference import o_proj_module
from tests.tolerance import rounding_bound


def _modules(hf, family: str, layer: int):
    """The native attention module and MLP of one decoder layer."""
    if family == "gpt2":
        block = hf.transformer.h[layer]
        return block.attn, block.mlp
    if family == "gpt_neox":
        block = hf.gpt_neox.layers[layer]
        return block.attention, block.mlp
    block = hf.model.layers[layer]
    return block.self_attn, block.mlp


def reference(model, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(estimate [L, H], GradDrop score [L, H])`` of zero-ablation, plain torch."""
    hf, n_layers = model.hf, model.n_layers
    zs: dict = {}
    outs: dict = {}
    handles = []
    for layer in range(n_layers):
        handles.append(
            o_proj_module(hf, model.family, layer).register_forward_pre_hook(
                lambda mod, args, layer=layer: zs.__setitem__(layer, args[0])
            )
        )
        for name, module in zip(("attn", "mlp"), _modules(hf, model.family, layer)):
            handles.append(
                module.register_forward_hook(
                    lambda mod, args, out, key=(name, layer): outs.__setitem__(
                        key, out[0] if isinstance(out, tuple) else out
                    )
                )
            )
    try:
        logits = hf(torch.tensor([ids])).logits[0]
    finally:
        for h in handles:
            h.remove()
    metric = logits[-2].log_softmax(-1)[ids[-1]]  # TargetLogprob(1)
    wrt = [zs[layer] for layer in range(n_layers)]

    def estimate(grads):
        return (
            torch.stack(
                [
                    -(z * g).view(-1, model.n_heads, model.head_dim).sum((0, 2))
                    for z, g in zip(wrt, grads)
                ]
            )
            .double()
            .detach()
        )

    plain = estimate(torch.autograd.grad(metric, wrt, retain_graph=True))
    score = torch.zeros_like(plain)
    for layer in range(n_layers):
        stop = [outs[(k, layer)].register_hook(torch.zeros_like) for k in ("attn", "mlp")]
        score += estimate(torch.autograd.grad(metric, wrt, retain_graph=True)).abs()
        for h in stop:
            h.remove()
    return plain, score / (n_layers - 1)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "olmo2", "gemma2"])
def test_grad_drop_equals_plain_torch(family, byte_tokenizer, sp_tokenizer):
    model = build_tiny(family, sp_tokenizer if family == "llama" else byte_tokenizer)
    ids = model.tokenize(PROMPTS[2])
    spec = Zero(all_heads(model))
    got = head_attribution_patching(model, [ids], TargetLogprob(1), intervene=spec)[0]
    dropped = head_attribution_patching(
        model, [ids], TargetLogprob(1), intervene=spec, grad_drop=True
    )[0]
    ref, ref_dropped = reference(model, ids)
    # both sum len(ids) x head_dim products of the same float32 tensors computed by two
    # runs (the batch shape differs: rounding of every layer), relative to the largest
    # |estimate|; a wrong layer or head is off by the estimates' own size
    bound = rounding_bound(
        magnitude=float(ref.abs().max()), width=len(ids) * model.head_dim, depth=model.n_layers
    )
    assert float((got - ref).abs().max()) <= bound
    assert float((dropped - ref_dropped).abs().max()) <= bound
    assert float((dropped - ref_dropped.flip(0)).abs().max()) > 100 * bound  # layers swapped
    # the last layer has no layer above it: its score is its |estimate|
    last = model.n_layers - 1
    assert float((dropped[last] - got[last].abs()).abs().max()) <= bound
