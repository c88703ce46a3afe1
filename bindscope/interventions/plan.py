"""Turn checked row ops (`resolve.resolve_rows`) into the `ops.TracePlan` a trace body applies.

Donor rows run in an earlier invoke, left-padded to the texts' width, so a column is one
end-aligned position in both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from bindscope.batch import Batch
from bindscope.interventions import ops
from bindscope.interventions.rowops import Planner, RowOp, attention_call
from bindscope.protocols import LanguageModel

__all__ = ["PlannedBatch", "Planner", "attention_call", "plan_batch", "plan_batches"]


@dataclass(frozen=True)
class PlannedBatch:
    """One batch of texts (widened to its donors' width), its donor invoke's inputs and its plan."""

    batch: Batch
    donors: dict[str, torch.Tensor] | None
    plan: ops.TracePlan


def plan_batches(
    model: LanguageModel, texts: Sequence, rows: Sequence[tuple[RowOp, ...]], *, batch_size: int
) -> Iterator[PlannedBatch]:
    """Batch ``texts`` like ``model.batches`` and plan each batch's interventions."""
    for batch in model.batches(texts, batch_size=batch_size):
        yield plan_batch(model, batch, [rows[i] for i in batch.indices])


def plan_batch(
    model: LanguageModel, batch: Batch, rows: Sequence[tuple[RowOp, ...]]
) -> PlannedBatch:
    """Plan one batch; ``rows[r]`` are the ops of batch row ``r``."""
    donor_ids: dict[tuple[int, ...], int] = {}
    for row in rows:
        for op in row:
            if op.donor is not None:
                donor_ids.setdefault(op.donor, len(donor_ids))
    donors = None
    if donor_ids:
        batch, donors = _with_donors(model, batch, donor_ids)
    planner = Planner(model, len(rows), batch.input_ids.shape[1], donor_ids)
    for r, row in enumerate(rows):
        for op in row:
            op.add_to(planner, r, batch.lengths[r])
    plan = planner.plan(donors)
    if plan.path is not None:  # each text's scratch rows: copies of it, slot by slot
        slots = plan.path.slots
        plan.path.donor_inputs = donors
        plan.path.scratch_inputs = {
            k: v.repeat_interleave(slots, 0) for k, v in batch.inputs.items()
        }
    return PlannedBatch(batch, donors, plan)


def _with_donors(
    model: LanguageModel, batch: Batch, donor_ids: dict[tuple[int, ...], int]
) -> tuple[Batch, dict[str, torch.Tensor]]:
    """Re-pad the batch together with its donor rows, so both share one width."""
    n_rows = len(batch.indices)
    own = [batch.input_ids[r, batch.pad(r) :].tolist() for r in range(n_rows)]
    full = model.pad(list(range(n_rows + len(donor_ids))), own + [list(d) for d in donor_ids])
    widened = replace(batch, **{name: getattr(full, name)[:n_rows] for name in full.inputs})
    return widened, {k: v[n_rows:] for k, v in full.inputs.items()}
