"""BSI, EB and EB*: how strongly heads bind a term's tokens to each other."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


def span_pairs(span: Sequence[int]) -> list[tuple[int, int]]:
    """All (later, earlier) index pairs inside a span."""
    return [(span[i], span[j]) for i in range(len(span)) for j in range(i)]


def pair_index(
    rows: Sequence[Sequence[tuple[int, int]]], *, min_width: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key ``[b, P]`` and weight (1/|pairs|, 0: padding) for ``ops.span_pair_bsi``."""
    width = max(min_width, max(len(row) for row in rows))
    query = torch.zeros(len(rows), width, dtype=torch.long)
    key = torch.zeros(len(rows), width, dtype=torch.long)
    weight = torch.zeros(len(rows), width)
    for r, row in enumerate(rows):
        for c, (a, b) in enumerate(row):
            query[r, c], key[r, c], weight[r, c] = a, b, 1.0 / len(row)
    return query, key, weight


def bsi_from_probs(probs: torch.Tensor, span: Sequence[int]) -> torch.Tensor:
    """BSI ``[L, H]`` from full probabilities ``[L, H, n, n]`` (NaN for spans < 2 tokens)."""
    pairs = span_pairs(span)
    if not pairs:
        return torch.full(probs.shape[:2], float("nan"))
    return pair_probs(probs, pairs).float().mean(-1)


def pair_probs(probs: torch.Tensor, pairs: Sequence[tuple[int, int]]) -> torch.Tensor:
    """``[L, H, pairs]``: full probabilities ``[L, H, n, n]`` at each (query, key) pair."""
    q = torch.tensor([a for a, _ in pairs])
    k = torch.tensor([b for _, b in pairs])
    return probs[:, :, q, k]


@dataclass(frozen=True)
class LayerSummary:
    """EB per layer and the summaries derived from it."""

    eb: torch.Tensor  # [L]
    eb_star: float
    eb_star_norm: float
    best_layer: int
    entropy: float


def summarize(bsi: torch.Tensor) -> LayerSummary:
    """EB, EB*, normalised EB*, best layer and entropy from BSI ``[L, H]``."""
    n_heads = bsi.shape[1]
    if torch.isnan(bsi).any():
        nan = float("nan")
        return LayerSummary(torch.full(bsi.shape[:1], nan), nan, nan, -1, nan)
    eb = bsi.max(1).values - bsi.mean(1)  # [L]
    best = int(torch.argmax(eb))  # first arg-max
    eb_star = float(eb[best])
    q = bsi[best].clamp(min=1e-10)
    p = q / q.sum()
    entropy = float(-(p * p.log()).sum())
    return LayerSummary(eb, eb_star, eb_star / (1 - 1 / n_heads), best, entropy)


@dataclass(frozen=True)
class BindingResult:
    """EB* and its parts for one prompt record (``skipped``: why not measured; NaN numbers)."""

    key: str
    prompt_id: str
    term: str
    task: str
    control_group: str | None
    eb_star: float
    eb_star_norm: float
    best_layer: int
    eb: torch.Tensor
    bsi: torch.Tensor
    entropy: float
    span: tuple[int, ...]
    span_tokens: tuple[str, ...]
    flags: tuple[str, ...] = ()
    skipped: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def n_span(self) -> int:
        """Tokens in the term's span."""
        return len(self.span)

    def to_dict(self) -> dict:
        """JSON-ready dict (NaN becomes null)."""
        return {name: _plain(getattr(self, name)) for name in (*PROMPT_FIELDS, *MEASURES)}


#: The prompt's fields `BindingResult.to_dict` writes first (a result line's item fields).
PROMPT_FIELDS = ("key", "prompt_id", "term", "task", "control_group")
#: The measures `BindingResult.to_dict` writes after the prompt's fields, in its order.
MEASURES = (
    *("eb_star", "eb_star_norm", "best_layer", "entropy", "n_span", "span", "span_tokens"),
    *("flags", "skipped", "eb", "bsi"),
)


def _plain(value: Any) -> Any:
    # tensors and tuples as (nested) lists of Python values, NaN as None
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value
