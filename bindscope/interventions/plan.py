"""Turn checked row ops (`specs.resolve_rows`) into the plain tensors a trace body applies.

A plan is a dict of tensors, ints and strings only, so it ships by value to NDIF, where
``ops.run_layers(model, plan=plan, donors=...)`` applies it layer by layer:

* ``zero``: ``{layer: keep [b, H] float}``, 0 where a row's head is zeroed;
* ``mean``: ``{layer: [(replace [b, H] bool, means [H, hd]), ...]}``;
* ``patch``: ``{layer: [(where [b, W, H] bool, donor_row [b] long), ...]}``: the donor rows
  run in an earlier invoke of the same trace, left-padded to the same width ``W``, so one
  column is one end-aligned position in both;
* ``knockout``: ``{layer: removed [b, H, W, W] bool}`` plus ``site``, the ``.source``
  label of the attention call and the index of its mask argument; with donors it is
  ``knockout_batch`` instead, over donor and patched rows together (an empty invoke).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from bindscope.interventions.ops import by_layer
from bindscope.interventions.specs import RowOp

__all__ = ["PlannedBatch", "plan_batch", "plan_batches"]


@dataclass(frozen=True)
class PlannedBatch:
    """One batch of texts, its donor rows (if any) and its plan.

    Attributes:
        batch: The texts' left-padded ``Batch`` (widened to the donors' width if needed).
        donors: Keyword inputs of the donor invoke, or ``None`` when nothing is patched.
        plan: The tensors ``ops.run_layers(plan=)`` applies (empty: no intervention).
    """

    batch: object
    donors: dict[str, torch.Tensor] | None
    plan: dict


def plan_batches(
    model, texts: Sequence, rows: Sequence[tuple[RowOp, ...]], *, batch_size: int
) -> Iterator[PlannedBatch]:
    """Batch ``texts`` like ``model.batches`` and plan each batch's interventions."""
    for batch in model.batches(texts, batch_size=batch_size):
        yield plan_batch(model, batch, [rows[i] for i in batch.indices])


def plan_batch(model, batch, rows: Sequence[tuple[RowOp, ...]]) -> PlannedBatch:
    """Plan one batch; ``rows[r]`` are the ops of batch row ``r``."""
    from bindscope.batch import Batch

    n_rows, n_heads = len(rows), model.n_heads
    donor_ids: dict[tuple[int, ...], int] = {}
    for row in rows:
        for op in row:
            if op.kind == "donor":
                donor_ids.setdefault(op.donor, len(donor_ids))
    donors = None
    if donor_ids:
        own = [batch.input_ids[r, batch.pad(r) :].tolist() for r in range(n_rows)]
        full = model._pad(list(range(n_rows + len(donor_ids))), own + [list(d) for d in donor_ids])
        part = {k: v[:n_rows] for k, v in full.inputs.items()}
        batch = Batch(
            batch.indices,
            part["input_ids"],
            part["attention_mask"],
            part["position_ids"],
            batch.lengths,
        )
        donors = {k: v[n_rows:] for k, v in full.inputs.items()}
    width = batch.input_ids.shape[1]
    zero: dict[int, torch.Tensor] = {}
    mean: dict[int, list] = {}
    patch: dict[int, list] = {}
    knockout: dict[int, torch.Tensor] = {}
    for r, row in enumerate(rows):
        n = batch.lengths[r]
        slot = 0  # each donor op of a row gets its own patch entry
        for op in row:
            layers = by_layer(op.heads)
            if op.kind == "zero":
                for layer, heads in layers.items():
                    zero.setdefault(layer, torch.ones(n_rows, n_heads))[r, heads] = 0.0
            elif op.kind == "mean":
                for layer, heads in layers.items():
                    entries = mean.setdefault(layer, [])
                    entry = next((e for e in entries if e[1] is op.means[layer]), None)
                    if entry is None:
                        entry = (torch.zeros(n_rows, n_heads, dtype=torch.bool), op.means[layer])
                        entries.append(entry)
                    entry[0][r, heads] = True
            elif op.kind == "donor":
                m = len(op.donor)
                if op.positions is None:
                    columns = list(range(width - min(n, m), width))
                else:  # positions of the text; the donor must have them (end-aligned)
                    columns = [width - n + p for p in op.positions if p >= n - m]
                for layer, heads in layers.items():
                    entries = patch.setdefault(layer, [])
                    while len(entries) <= slot:
                        entries.append(
                            (
                                torch.zeros(n_rows, width, n_heads, dtype=torch.bool),
                                torch.zeros(n_rows, dtype=torch.long),
                            )
                        )
                    where, donor_row = entries[slot]
                    for c in columns:
                        where[r, c, heads] = True
                    donor_row[r] = donor_ids[op.donor]
                slot += 1
            elif op.kind == "knockout":
                offset = width - n  # left padding
                q = torch.tensor([offset + a for a, _ in op.edges])
                k = torch.tensor([offset + b for _, b in op.edges])
                for layer, heads in layers.items():
                    removed = knockout.setdefault(
                        layer, torch.zeros(n_rows, n_heads, width, width, dtype=torch.bool)
                    )
                    for h in heads:
                        removed[r, h, q, k] = True
    plan: dict = {}
    if zero:
        plan["zero"] = zero
    if mean:
        plan["mean"] = {layer: [tuple(e) for e in entries] for layer, entries in mean.items()}
    if patch:
        plan["patch"] = patch
        plan["donor_layers"] = sorted(patch)
    if knockout:
        plan["site"] = model.knockout_site
        if donors is None:
            plan["knockout"] = knockout
        else:  # knocked out for the whole batch at once, donor rows (first) untouched
            n_donors = donors["input_ids"].shape[0]
            plan["knockout_batch"] = {
                layer: torch.cat(
                    [torch.zeros_like(removed[:1]).expand(n_donors, -1, -1, -1), removed]
                )
                for layer, removed in knockout.items()
            }
    return PlannedBatch(batch, donors, plan)
