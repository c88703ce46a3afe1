"""Head-taxonomy scores computed inside the trace: O(L x H) per text leaves it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tqdm.auto import tqdm

from bindscope.batch import Batch
from bindscope.interventions import ops, run_layers
from bindscope.interventions.plan import PlannedBatch
from bindscope.metrics.binding import pair_index
from bindscope.metrics.taxonomy import repeated_pairs, repeated_sequences, text_pairs
from bindscope.protocols import LanguageModel

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
    """Pair-mean scores (and optionally ``spread``) ``[L, H]`` per token-id row.

    ``rows`` are token ids as the model sees them (BOS included when it has one);
    ``pairs_for(n) -> {score: [(query, key), ...]}`` gives unpadded positions for a row of
    ``n`` tokens (a score with no pairs for a row is NaN there); ``spread`` also reduces the
    participation ratio over queries ``1..n-1``. One ``{score: [L, H] float32}`` per row, in
    input order.
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
    """``[b, L, H, scores]``: one trace of ``batch`` reducing each score's pairs in it."""
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

    def body(donors: dict | None, reduce: Callable[[torch.Tensor], torch.Tensor] = reduce):
        # bound to a name: a remote run returns only saved values the body binds
        found = run_layers(model, capture=range(model.n_layers), reduce=reduce)
        return found

    found = model.trace_batch(PlannedBatch(batch, None, ops.TracePlan()), body)
    return torch.stack([found[layer] for layer in range(model.n_layers)], 1)


def _query_weight(pads: list[int], lengths: Sequence[int], width: int) -> torch.Tensor:
    """``[b, width]``: each row's weight ``1 / (n - 1)`` on its queries ``1..n-1``, else 0."""
    query_weight = torch.zeros(len(pads), width)
    for r, (p, n) in enumerate(zip(pads, lengths)):
        if n > 1:
            query_weight[r, p + 1 :] = 1.0 / (n - 1)
    return query_weight


def _row_scores(
    stacked: torch.Tensor, names: list[str], pairs: Pairs, spread: bool, length: int
) -> dict[str, torch.Tensor]:
    """One row's ``{score: [L, H]}`` from its ``[L, H, scores]`` (NaN where it has no pairs)."""
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
    """``sink``, ``previous_token`` and ``spread`` ``[L, H]`` per text.

    Texts are tokenized with the model's BOS policy: position 0 is BOS exactly when
    ``model.prepend_bos``.
    """
    rows = [model.tokenize(t) for t in texts]
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
    """``induction`` and ``duplicate_token`` ``[L, H]`` on ``n`` seeded repeated sequences.

    Each sequence is ``length`` distinct random token ids, then the same ids again, after a
    BOS when the model prepends one (`bindscope.metrics.taxonomy.repeated_sequences`).

    Returns:
        ``(scores, tokens)``: ``scores[i]`` is ``{"induction", "duplicate_token"}`` of
        sequence ``i``, each ``[L, H]``; ``tokens[i]`` its ``length`` random ids, once
        (the model read BOS, if any, then ``tokens[i] + tokens[i]``).
    """
    rows, start, tokens = repeated_sequences(model, n=n, length=length, seed=seed)
    pairs = repeated_pairs(start, length)  # the same for every row
    scores = score_rows(model, rows, lambda _n: pairs, batch_size=batch_size, progress=progress)
    return scores, tokens


__all__ = ["repeated_scores", "score_rows", "text_scores"]
