"""Per-head weights with TransformerLens' names and shapes, and a head's QK and OV circuits.

``W_K`` and ``W_V`` are given per query head (GQA). The circuits are the weights' products
only: no rotary positions, q/k norms, soft-capping or norms.
"""

from __future__ import annotations

from typing import Any

import torch

from bindscope.errors import InputError, UnsupportedModelError
from bindscope.interventions import ops
from bindscope.nnsight_private import underlying_module
from bindscope.protocols import LanguageModel


def weights_here(model: LanguageModel) -> None:
    """Refuse a model whose weights are not here (NDIF: the meta device)."""
    if next(model.hf.parameters()).device.type == "meta":
        raise InputError(
            f"{model.name}: the weights stay on the server (meta device); per-head weights, "
            "circuits and cache decompositions need a local model"
        )


def kv_head(model: LanguageModel) -> tuple[int, ...]:
    """The key/value head each query head reads: ``h // (n_heads // n_kv_heads)``."""
    group = model.n_heads // model.n_kv_heads
    return tuple(h // group for h in range(model.n_heads))


def _attention(model: LanguageModel, layer: int) -> Any:
    return underlying_module(ops.site_module(model.nnsight, layer, "self_attn"))


def linear_rows(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``([out, in] weight, [out] bias or None)``; GPT-2's Conv1D stores ``[in, out]``."""
    weight = module.weight.detach()
    weight = weight.T if type(module).__name__ == "Conv1D" else weight
    return weight, getattr(module, "bias", None)


def _qkv_rows(model: LanguageModel, layer: int) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The q, k and v projections' rows ``[heads * hd, d]`` and biases, fused ones split."""
    attn = _attention(model, layer)
    if hasattr(attn, "q_proj"):
        return [linear_rows(getattr(attn, f"{p}_proj")) for p in "qkv"]
    fused = next(
        (getattr(attn, n) for n in ("qkv_proj", "c_attn", "query_key_value") if hasattr(attn, n)),
        None,
    )
    if fused is None:
        raise UnsupportedModelError(
            f"{model.name} ({model.family}): layer {layer}'s attention has no q_proj, qkv_proj, "
            "c_attn or query_key_value; per-head weights cannot be read"
        )
    weight, bias = linear_rows(fused)
    weights = _split_fused(model, attn, weight)
    biases = [None] * 3 if bias is None else _split_fused(model, attn, bias[:, None])
    return [(w, None if b is None else b[:, 0]) for w, b in zip(weights, biases)]


def _split_fused(model: LanguageModel, attn: Any, rows: torch.Tensor) -> list[torch.Tensor]:
    """A fused projection's rows split into q, k and v rows."""
    hd = model.head_dim
    if hasattr(attn, "query_key_value"):  # GPT-NeoX interleaves [q_h, k_h, v_h] per head
        parts = rows.view(model.n_heads, 3, hd, -1).unbind(1)
        return [part.reshape(model.n_heads * hd, -1) for part in parts]
    sizes = [model.n_heads * hd, model.n_kv_heads * hd, model.n_kv_heads * hd]  # q, k, v
    return list(rows.split(sizes))


def layer_qkv(model: LanguageModel, layer: int, which: int, *, bias: bool = False) -> torch.Tensor:
    """One layer's ``W_Q``/``W_K``/``W_V`` (``which`` 0/1/2) ``[H, d, hd]``, or the biases."""
    weights_here(model)
    n = model.n_heads if which == 0 else model.n_kv_heads
    pick = list(range(model.n_heads)) if which == 0 else list(kv_head(model))
    weight, b = _qkv_rows(model, layer)[which]
    if not bias:
        return weight.view(n, -1, weight.shape[-1]).transpose(1, 2)[pick].cpu()
    if b is None:
        return weight.new_zeros(model.n_heads, model.head_dim).cpu()
    return b.detach().view(n, -1)[pick].cpu()


def _stack(model: LanguageModel, which: int, bias: bool) -> torch.Tensor:
    return torch.stack([layer_qkv(model, i, which, bias=bias) for i in range(model.n_layers)])


def output_projection(model: LanguageModel, layer: int) -> Any:
    """The module whose input is the ``head_out`` site: it maps head outputs to the residual."""
    module, port, _ = model.sites["head_out"]
    if port != "input":
        raise UnsupportedModelError(
            f"{model.name} ({model.family}): per-head output weights are read from the module "
            f"whose input is head_out, but the family row puts head_out at the {port} of "
            f"{module!r}; give head_out as At(<output projection>, 'input') in its Sites"
        )
    return underlying_module(ops.site_module(model.nnsight, layer, module))


def layer_w_o(model: LanguageModel, layer: int) -> torch.Tensor:
    """One layer's ``W_O``, ``[H, hd, d]``."""
    weights_here(model)
    weight, _ = linear_rows(output_projection(model, layer))  # [d, H * hd]
    return weight.T.reshape(model.n_heads, model.head_dim, -1).cpu()


def W_O(model: LanguageModel) -> torch.Tensor:  # TransformerLens' name
    """``[L, H, hd, d]``: head ``h`` adds ``z_h @ W_O[l, h]`` (before any post-attention norm)."""
    return torch.stack([layer_w_o(model, layer) for layer in range(model.n_layers)])


def layer_b_o(model: LanguageModel, layer: int) -> torch.Tensor:
    """One layer's output-projection bias, ``[d]`` (zeros where it has none)."""
    weights_here(model)
    bias = linear_rows(output_projection(model, layer))[1]
    return torch.zeros(model.d_model) if bias is None else bias.detach().cpu()


def b_O(model: LanguageModel) -> torch.Tensor:
    """``[L, d]``: the output projection's bias (zeros where it has none)."""
    return torch.stack([layer_b_o(model, layer) for layer in range(model.n_layers)])


def W_U(model: LanguageModel) -> torch.Tensor:
    """``[d, vocab]``: the LM head's weight transposed; token ``t``'s logit is ``x @ W_U[:, t]``."""
    weights_here(model)
    return underlying_module(model.nnsight.lm_head).weight.detach().T.cpu()


def b_U(model: LanguageModel) -> torch.Tensor:
    """``[vocab]``: the LM head's bias (zeros where it has none, as in all 13 families)."""
    bias = getattr(underlying_module(model.nnsight.lm_head), "bias", None)
    return torch.zeros(W_U(model).shape[1]) if bias is None else bias.detach().cpu()


def ov_circuit(
    model: LanguageModel, layer: int, head: int, *, factored: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``W_V[l, h] @ W_O[l, h]`` ``[d, d]`` (``factored``: the two factors)."""
    model.check_heads([(layer, head)])
    pair = (layer_qkv(model, layer, 2)[head], layer_w_o(model, layer)[head])
    return pair if factored else pair[0] @ pair[1]


def qk_circuit(
    model: LanguageModel, layer: int, head: int, *, factored: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``W_Q[l, h] @ W_K[l, h].T`` ``[d, d]``, without positions or scaling (``factored``: both)."""
    model.check_heads([(layer, head)])
    pair = (layer_qkv(model, layer, 0)[head], layer_qkv(model, layer, 1)[head].T)
    return pair if factored else pair[0] @ pair[1]


def _property(which: int, bias: bool, doc: str) -> property:
    return property(lambda model: _stack(model, which, bias), doc=doc)


PROPERTIES = {
    "W_Q": _property(0, False, "``[L, H, d, hd]`` query weights per head."),
    "W_K": _property(
        1, False, "``[L, H, d, hd]`` key weights of the kv head each query head reads."
    ),
    "W_V": _property(
        2, False, "``[L, H, d, hd]`` value weights of the kv head each query head reads."
    ),
    "b_Q": _property(0, True, "``[L, H, hd]`` query biases (zeros where there are none)."),
    "b_K": _property(1, True, "``[L, H, hd]`` key biases per query head (zeros where none)."),
    "b_V": _property(2, True, "``[L, H, hd]`` value biases per query head (zeros where none)."),
    "W_O": property(W_O, doc=W_O.__doc__),
    "b_O": property(b_O, doc=b_O.__doc__),
    "W_U": property(W_U, doc=W_U.__doc__),
    "b_U": property(b_U, doc=b_U.__doc__),
    "kv_head": property(kv_head, doc=kv_head.__doc__),
}
