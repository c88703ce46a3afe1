"""Per-head direct logit attribution (the maths: ``bindscope.metrics.attribution``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bindscope.batch import check_texts
from bindscope.errors import InputError
from bindscope.interventions import head_weights, ops
from bindscope.metrics.attribution import HeadContributions, frozen_norm
from bindscope.nnsight_private import underlying_module
from bindscope.protocols import LanguageModel
from bindscope.runners.attribution_metrics import token_id

__all__ = ["head_attribution", "head_contributions"]


@torch.no_grad()
def head_contributions(
    model: LanguageModel, texts: Sequence[str], *, batch_size: int = 16
) -> list[HeadContributions]:
    """Every head's residual-stream contribution at each text's last position (clean run)."""
    if getattr(model, "remote", False):
        raise InputError(
            f"{model.name}: head attribution needs the weights on this machine; "
            "run it on a local model"
        )
    row, env = model.family_row, model.nnsight
    texts = check_texts(texts)
    out: list[HeadContributions | None] = [None] * len(texts)
    for batch in model.batches(texts, batch_size=batch_size):
        with env.trace(**batch.inputs, **model.trace_options) as tracer:
            found = ops.last_position_inputs(model, row.final_norm)
            tracer.stop()
        b = batch.input_ids.shape[0]
        per_layer = []
        for layer in range(model.n_layers):
            w = head_weights.layer_w_o(model, layer).double()  # [H, hd, d]
            z = found[layer].double().view(b, model.n_heads, model.head_dim)  # [b, H, hd]
            c = torch.einsum("hkd,bhk->bhd", w, z)  # [b, H, d]
            if row.attention_post_norm:
                norm = underlying_module(ops.site_module(env, layer, row.attention_post_norm))
                c = frozen_norm(norm, c.sum(1) + head_weights.layer_b_o(model, layer).double(), c)
            per_layer.append(c)
        heads = torch.stack(per_layer, 1)  # [b, L, H, d]
        final = found["final"].double()
        for r, index in enumerate(batch.indices):
            out[index] = HeadContributions(heads[r], final[r])
    return out  # type: ignore[return-value]


def _direction(model: LanguageModel, target: int | str) -> torch.Tensor:
    if isinstance(target, (tuple, list)) and len(target) == 2:
        return _direction(model, target[0]) - _direction(model, target[1])
    target = token_id(model, target, "target")
    unembed = underlying_module(model.nnsight.lm_head).weight.detach().double().cpu()
    return unembed[int(target)]


def head_attribution(
    model: LanguageModel, texts: Sequence[str], targets: Sequence, *, batch_size: int = 16
) -> list[torch.Tensor]:
    """Direct logit attribution ``[L, H]`` (float64) per text at its last position (local only).

    A target is a token id, a one-token string, or ``(a, b)`` for the difference a - b.
    """
    texts = check_texts(texts)
    if len(targets) != len(texts):
        raise InputError(f"{len(targets)} targets for {len(texts)} texts; give one per text")
    final_norm = underlying_module(getattr(model.nnsight.model, model.family_row.final_norm))
    out = []
    for text_parts, target in zip(head_contributions(model, texts, batch_size=batch_size), targets):
        normed = frozen_norm(final_norm, text_parts.final, text_parts.heads)  # [L, H, d]
        out.append(normed @ _direction(model, target))
    return out
