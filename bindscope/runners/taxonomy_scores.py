"""Head-taxonomy scores computed inside the trace: O(L x H) per text leaves it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tqdm.auto import tqdm

from bindscope.batch import Batch, check_texts, token_ids
from bindscope.errors import whole_number
from bindscope.interventions import ops
from bindscope.interventions.plan import PlannedBatch
from bindscope.metrics.binding import pair_index
from bindscope.metrics.taxonomy import repeated_pairs, repeated_sequences, text_pairs
from bindscope.protocols import LanguageModel
from bindscope.runners.binding import layer_reductions

Pairs = dict[str, list[tuple[int, int]]]


def score_rows(
    model: LanguageModel,
    rows: Sequence[Sequence[int]],
    pairs_for: Callable[[int], Pairs],
    *,
    spread: bool = False,
    batch_size: int = 16,
    progress: bool = False,
) -> list[dict[str, torch.Tensor]]:
    """Pair-mean scores (and ``spread``) ``{score: [L, H]}`` per token-id row, in order.

    ``pairs_for(n)`` gives a row of ``n`` tokens its unpadded ``{score: [(query, key)]}``.
    """
    rows = [list(r) for r in rows]
    names = list(pairs_for(max(len(r) for r in rows)))
    out: list[dict[str, torch.Tensor] | None] = [None] * len(rows)
    with model.eager(), torch.no_grad():
        batches = list(model.batches(rows, batch_size=batch_size))
        for batch in tqdm(batches, desc="heads", unit="batch", disable=not progress):
            per_row = [pairs_for(n) for n in batch.lengths]
            stacked = _batch_scores(model, batch, per_row, names, spread)
            for r, index in enumerate(batch.indices):
                out[index] = _row_scores(stacked[r], names, per_row[r], spread, batch.lengths[r])
    return out  # type: ignore[return-value]


def _batch_scores(
    model: LanguageModel, batch: Batch, per_row: list[Pairs], names: list[str], spread: bool
) -> torch.Tensor:
    width = batch.input_ids.shape[1]
    pads = [batch.pad(r) for r in range(len(batch.indices))]
    rows_pads = list(zip(per_row, pads))
    tensors = [
        pair_index([[(p + a, p + b) for a, b in row[name]] for row, p in rows_pads], min_width=1)
        for name in names
    ]
    query_weight = _query_weight(pads, batch.lengths, width)

    def reduce(
        probs: torch.Tensor,
        tensors: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = tensors,
        query_weight: torch.Tensor = query_weight,
    ) -> torch.Tensor:
        found = [ops.span_pair_bsi(probs, q, k, w) for q, k, w in tensors]
        if spread:
            found.append(ops.participation_ratio(probs, query_weight))
        return torch.stack(found, -1)  # [b, H, scores]

    return layer_reductions(model, PlannedBatch(batch, None, ops.TracePlan()), reduce)


def _query_weight(pads: list[int], lengths: Sequence[int], width: int) -> torch.Tensor:
    columns = torch.arange(width)  # a row's queries after its first token weigh 1/(n-1)
    rows = [(columns > p) / (n - 1) if n > 1 else torch.zeros(width) for p, n in zip(pads, lengths)]
    return torch.stack(rows)


def _row_scores(
    stacked: torch.Tensor, names: list[str], pairs: Pairs, spread: bool, length: int
) -> dict[str, torch.Tensor]:
    scores = {}
    for s, name in enumerate(names):
        value = stacked[:, :, s].float().clone()  # [L, H]
        scores[name] = value if pairs[name] else torch.full_like(value, torch.nan)
    if spread:
        value = stacked[:, :, -1].float().clone()
        scores["spread"] = value if length > 1 else value.fill_(torch.nan)
    return scores


def text_scores(
    model: LanguageModel, texts: Sequence[str], *, batch_size: int = 16, progress: bool = False
) -> list[dict[str, torch.Tensor]]:
    """``sink``, ``previous_token`` and ``spread`` ``[L, H]`` per text (BOS as the model's)."""
    rows = [token_ids(model, t) for t in check_texts(texts)]
    return score_rows(
        model, rows, text_pairs, spread=True, batch_size=batch_size, progress=progress
    )


def repeated_scores(
    model: LanguageModel,
    *,
    n: int = 32,
    length: int = 24,
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = False,
) -> tuple[list[dict[str, torch.Tensor]], list[list[int]]]:
    """``induction`` and ``duplicate_token`` ``[L, H]`` per seeded repeated sequence; its ids."""
    for name, value, least in (("n", n, 1), ("length", length, 1), ("seed", seed, 0)):
        whole_number(value, name, f"e.g. {name}={least + 1}", least=least)
    rows, start, tokens = repeated_sequences(model, n=n, length=length, seed=seed)
    pairs = repeated_pairs(start, length)  # the same for every row
    scores = score_rows(model, rows, lambda _n: pairs, batch_size=batch_size, progress=progress)
    return scores, tokens


__all__ = ["repeated_scores", "score_rows", "text_scores"]
