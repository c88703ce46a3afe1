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
from typing import TYPE_CHECKING

import torch

from bindscope.interventions.ops import by_layer
from bindscope.interventions.specs import RowOp
from bindscope.protocols import LanguageModel

if TYPE_CHECKING:
    from bindscope.batch import Batch

__all__ = ["PlannedBatch", "plan_batch", "plan_batches"]


@dataclass(frozen=True)
class PlannedBatch:
    """One batch of texts, its donor rows (if any) and its plan.

    Attributes:
        batch: The texts' left-padded ``Batch`` (widened to the donors' width if needed).
        donors: Keyword inputs of the donor invoke, or ``None`` when nothing is patched.
        plan: The tensors ``ops.run_layers(plan=)`` applies (empty: no intervention).
    """

    batch: Batch
    donors: dict[str, torch.Tensor] | None
    plan: dict


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
            if op.kind == "donor":
                assert op.donor is not None  # specs.resolve_rows sets it for every donor op
                donor_ids.setdefault(op.donor, len(donor_ids))
    donors = None
    if donor_ids:
        batch, donors = _with_donors(model, batch, donor_ids)
    planner = _Planner(len(rows), model.n_heads, batch.input_ids.shape[1], donor_ids)
    for r, row in enumerate(rows):
        planner.add_row(r, batch.lengths[r], row)
    return PlannedBatch(batch, donors, planner.plan(model, donors))


def _with_donors(
    model: LanguageModel, batch: Batch, donor_ids: dict[tuple[int, ...], int]
) -> tuple[Batch, dict[str, torch.Tensor]]:
    """Re-pad the batch together with its donor rows, so both share one width.

    Returns the widened batch and the donor invoke's keyword inputs.
    """
    from bindscope.batch import Batch

    n_rows = len(batch.indices)
    own = [batch.input_ids[r, batch.pad(r) :].tolist() for r in range(n_rows)]
    full = model._pad(list(range(n_rows + len(donor_ids))), own + [list(d) for d in donor_ids])
    part = {k: v[:n_rows] for k, v in full.inputs.items()}
    widened = Batch(
        batch.indices,
        part["input_ids"],
        part["attention_mask"],
        part["position_ids"],
        batch.lengths,
    )
    return widened, {k: v[n_rows:] for k, v in full.inputs.items()}


class _Planner:
    """Accumulates each row's ops into the per-layer tensors of one batch's plan."""

    def __init__(
        self, n_rows: int, n_heads: int, width: int, donor_ids: dict[tuple[int, ...], int]
    ) -> None:
        self.n_rows, self.n_heads, self.width = n_rows, n_heads, width
        self.donor_ids = donor_ids
        self.zero: dict[int, torch.Tensor] = {}
        self.mean: dict[int, list] = {}
        self.patch: dict[int, list] = {}
        self.knockout: dict[int, torch.Tensor] = {}

    def add_row(self, r: int, n: int, row: tuple[RowOp, ...]) -> None:
        """Add batch row ``r`` (``n`` real tokens) and its ops."""
        slot = 0  # each donor op of a row gets its own patch entry
        for op in row:
            layers = by_layer(op.heads)
            if op.kind == "zero":
                for layer, heads in layers.items():
                    self._zero_mask(layer)[r, heads] = 0.0
            elif op.kind == "mean":
                self._add_mean(r, op, layers)
            elif op.kind == "donor":
                self._add_patch(r, n, op, layers, slot)
                slot += 1
            elif op.kind == "knockout":
                self._add_knockout(r, n, op, layers)

    def _zero_mask(self, layer: int) -> torch.Tensor:
        return self.zero.setdefault(layer, torch.ones(self.n_rows, self.n_heads))

    def _add_mean(self, r: int, op: RowOp, layers: dict[int, list[int]]) -> None:
        assert op.means is not None  # specs.resolve_rows sets it for every mean op
        for layer, heads in layers.items():
            entries = self.mean.setdefault(layer, [])
            entry = next((e for e in entries if e[1] is op.means[layer]), None)
            if entry is None:
                entry = (
                    torch.zeros(self.n_rows, self.n_heads, dtype=torch.bool),
                    op.means[layer],
                )
                entries.append(entry)
            entry[0][r, heads] = True

    def _add_patch(
        self, r: int, n: int, op: RowOp, layers: dict[int, list[int]], slot: int
    ) -> None:
        assert op.donor is not None
        width, m = self.width, len(op.donor)
        if op.positions is None:
            columns = list(range(width - min(n, m), width))
        else:  # positions of the text; the donor must have them (end-aligned)
            columns = [width - n + p for p in op.positions if p >= n - m]
        for layer, heads in layers.items():
            entries = self.patch.setdefault(layer, [])
            while len(entries) <= slot:
                entries.append(
                    (
                        torch.zeros(self.n_rows, width, self.n_heads, dtype=torch.bool),
                        torch.zeros(self.n_rows, dtype=torch.long),
                    )
                )
            where, donor_row = entries[slot]
            for c in columns:
                where[r, c, heads] = True
            donor_row[r] = self.donor_ids[op.donor]

    def _add_knockout(self, r: int, n: int, op: RowOp, layers: dict[int, list[int]]) -> None:
        width = self.width
        offset = width - n  # left padding
        q = torch.tensor([offset + a for a, _ in op.edges])
        k = torch.tensor([offset + b for _, b in op.edges])
        for layer, heads in layers.items():
            removed = self.knockout.setdefault(
                layer, torch.zeros(self.n_rows, self.n_heads, width, width, dtype=torch.bool)
            )
            for h in heads:
                removed[r, h, q, k] = True

    def plan(self, model: LanguageModel, donors: dict[str, torch.Tensor] | None) -> dict:
        """The plan dict (module docstring) of everything added."""
        plan: dict = {}
        if self.zero:
            plan["zero"] = self.zero
        if self.mean:
            plan["mean"] = {
                layer: [tuple(e) for e in entries] for layer, entries in self.mean.items()
            }
        if self.patch:
            plan["patch"] = self.patch
            plan["donor_layers"] = sorted(self.patch)
        if self.knockout:
            plan["site"] = model.knockout_site
            if donors is None:
                plan["knockout"] = self.knockout
            else:  # knocked out for the whole batch at once, donor rows (first) untouched
                n_donors = donors["input_ids"].shape[0]
                plan["knockout_batch"] = {
                    layer: torch.cat(
                        [torch.zeros_like(removed[:1]).expand(n_donors, -1, -1, -1), removed]
                    )
                    for layer, removed in self.knockout.items()
                }
        return plan
