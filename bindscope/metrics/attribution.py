"""Per-head direct logit attribution: the maths (docs/internals.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["HeadContributions", "frozen_norm"]


@dataclass(frozen=True)
class HeadContributions:
    """Residual-stream contributions (float64) at the last position of one text."""

    heads: torch.Tensor  # [L, H, d] through W_O (and the attention post-norm, frozen)
    final: torch.Tensor  # [d] the residual stream entering the final norm


def frozen_norm(norm: torch.nn.Module, source: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Apply ``norm`` to ``x`` with its scale frozen at the value ``source`` gives, no bias.

    RMSNorm: ``x / rms(source) * w`` (Gemma: ``1 + w``); LayerNorm: the centering is
    linear and stays, ``(x - mean x) / std(source) * w``.
    """
    eps: Any = getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", 1e-5)
    name = type(norm).__name__
    weight = getattr(norm, "weight", None)
    weight = torch.ones(()) if weight is None else weight.detach().double().cpu()
    if "Gemma" in name:
        weight = 1.0 + weight
    source = source.double()
    if "RMSNorm" in name:
        scale = torch.rsqrt(source.pow(2).mean(-1, keepdim=True) + eps)
    else:
        scale = torch.rsqrt(source.var(-1, unbiased=False, keepdim=True) + eps)
        x = x - x.mean(-1, keepdim=True)
    if x.dim() > source.dim():
        scale = scale[..., None, :]
    return x * scale * weight
