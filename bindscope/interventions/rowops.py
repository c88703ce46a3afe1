"""Row ops: one checked intervention of one text, as typed data a `plan.Planner` consumes.

A row op knows which cells it claims (two specs on one cell of a text are refused) and
how it adds itself to a batch's plan (`add_to`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from bindscope.families import HEAD_SITES
from bindscope.interventions import ops
from bindscope.interventions.trace.features import features_key


class Planner(Protocol):
    """What a row op needs of ``plan.Planner`` (a protocol: the planner imports the row ops)."""

    donor_ids: dict[tuple[int, ...], int]
    width: int

    def columns(self, n: int, positions: tuple[int, ...] | None, donor: int | None = None) -> Any:
        """Padded columns of a row with ``n`` real tokens (None: every position)."""
        ...

    def edit(
        self,
        site: str,
        layer: int,
        make: Any,
        *,
        every_position: bool,
        same: Any = None,
        dictionary: Any = None,
    ) -> ops.Edit:
        """The edit of ``(site, layer)`` made by ``make(where)``, shared when ``same`` matches."""
        ...

    def mark(self, edit: ops.Edit, r: int, columns: Any, units: tuple[int, ...]) -> None:
        """Mark row ``r``'s cells (``columns`` x ``units``) in ``edit``."""
        ...

    def knock_out(self, r: int, n: int, units: dict[int, tuple[int, ...]], edges: tuple) -> None:
        """Remove row ``r``'s ``edges`` for the heads ``units`` (per layer)."""
        ...

    def patch_paths(self, r: int, donor: tuple[int, ...] | None, mask: Any, means: Any) -> None:
        """Patch row ``r``'s edges ``mask`` (``[S, R]`` bool) from ``donor`` (or ``means``)."""
        ...


__all__ = ["AddOp", "DonorOp", "HookOp", "KnockoutOp", "PathOp", "ReplaceOp", "RowOp", "unit_shape"]

# Sites made of several units a spec can pick by index, as (layer, unit) pairs: heads
# (kv heads at k and v) and the MLP's neurons.
UNIT_SITES = (*HEAD_SITES, "mlp_post")


def unit_shape(model: Any, site: str) -> tuple[int, int]:
    """``(U, k)`` of a site's ``[b, s, U, k]`` view (``ops.unit_view``; pattern and scores: k 0)."""
    if site in ("head_out", "q"):
        return model.n_heads, model.head_dim
    if site in ("k", "v"):
        return model.n_kv_heads, model.head_dim
    if site == "mlp_post":
        return model.d_mlp, 1
    if site in ("pattern", "scores"):
        return model.n_heads, 0
    return 1, model.d_model


# ((layer, (unit, ...)), ...): the units of a site each layer touches (heads at head_out)
Units = tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(frozen=True)
class RowOp:
    """What every row op has: its spec (for messages), site, units per layer and positions.

    ``dictionary``: a ``TraceDictionary`` when the units are its features (latents).
    """

    spec: str
    site: str
    units: Units
    positions: tuple[int, ...] | None = None
    dictionary: Any = field(default=None, kw_only=True, compare=False)

    donor = None  # DonorOp's token ids (the planner batches donor rows)
    composes = False  # two ops of this kind may share a cell (additions commute)

    @property
    def every_position(self) -> bool:
        """Whether the op acts alike on every position (so on new tokens as well)."""
        return self.positions is None

    def cells(self) -> Iterator[tuple[str, int, int]]:
        """The ``(site, layer, unit)`` cells this op claims."""
        site = self.site if self.dictionary is None else features_key(self.site)
        for layer, units in self.units:
            for unit in units:
                yield site, layer, unit

    def add_to(self, planner: Planner, r: int, n: int) -> None:
        """Add this op for batch row ``r`` (``n`` real tokens) to the planner."""
        raise NotImplementedError


@dataclass(frozen=True)
class ReplaceOp(RowOp):
    """Replace the cells by ``values[layer]`` (``[U, k]``), or by zero when ``values`` is None."""

    values: dict[int, torch.Tensor] | None = field(default=None, compare=False)

    def add_to(self, planner: Planner, r: int, n: int) -> None:
        """Add this op for batch row ``r`` (``n`` real tokens) to the planner."""
        columns = planner.columns(n, self.positions)
        for layer, units in self.units:
            value = None if self.values is None else self.values[layer]
            edit = planner.edit(
                self.site,
                layer,
                lambda where, value=value: ops.ReplaceEdit(where, value),
                every_position=columns is None,
                same=lambda e, value=value: isinstance(e, ops.ReplaceEdit) and e.value is value,
                dictionary=self.dictionary,
            )
            planner.mark(edit, r, columns, units)


@dataclass(frozen=True)
class DonorOp(RowOp):
    """Copy a donor text's activations, end-aligned (positions the donor lacks are kept)."""

    donor: tuple[int, ...] | None = None  # type: ignore[assignment]
    every_position = False  # aligned to one text's positions

    def add_to(self, planner: Planner, r: int, n: int) -> None:
        """Add this op for batch row ``r`` (``n`` real tokens) to the planner."""
        assert self.donor is not None  # set by every spec that makes one
        columns = planner.columns(n, self.positions, donor=len(self.donor))
        row = planner.donor_ids[self.donor]
        source = getattr(self.dictionary, "source", None) or self.site  # a transcoder's input
        for layer, units in self.units:
            # a row takes an edit it has no cell in yet (one donor per row and edit)
            edit = planner.edit(
                self.site,
                layer,
                lambda where, layer=layer: ops.DonorEdit(
                    where, (source, layer), torch.zeros(len(where), dtype=torch.long)
                ),
                every_position=False,
                same=lambda e: isinstance(e, ops.DonorEdit) and not bool(e.where[r].any()),
                dictionary=self.dictionary,
            )
            assert isinstance(edit, ops.DonorEdit)
            edit.donor_row[r] = row
            planner.mark(edit, r, columns, units)


@dataclass(frozen=True)
class AddOp(RowOp):
    """Add ``vector`` (``[U, k]``, scale included) to the cells."""

    vector: torch.Tensor | None = field(default=None, compare=False)
    composes = True

    def add_to(self, planner: Planner, r: int, n: int) -> None:
        """Add this op for batch row ``r`` (``n`` real tokens) to the planner."""
        columns = planner.columns(n, self.positions)
        vector = self.vector
        assert vector is not None  # a Steer spec always sets it
        for layer, units in self.units:
            edit = planner.edit(
                self.site,
                layer,
                lambda where: ops.AddEdit(where, vector),
                every_position=columns is None,
                same=lambda e: (
                    isinstance(e, ops.AddEdit)
                    and e.vector is self.vector
                    and not bool(e.where[r].any())
                ),
                dictionary=self.dictionary,
            )
            planner.mark(edit, r, columns, units)


@dataclass(frozen=True)
class HookOp(RowOp):
    """Call ``fn`` on the site of each listed layer, every position (each new token too).

    It claims no cell: hooks compose with everything, in the order the specs are listed.
    """

    fn: Any = field(default=None, compare=False)
    heads: bool = False  # the function sees [1, n, H, hd], not [1, n, d]

    def cells(self) -> Iterator[tuple[str, int, int]]:
        """No cell: a hook may share any."""
        return iter(())

    def add_to(self, planner: Planner, r: int, n: int) -> None:
        """Add this op for batch row ``r`` (``n`` real tokens) to the planner."""
        for layer, units in self.units:
            edit = planner.edit(
                self.site,
                layer,
                lambda where: ops.HookEdit(where, self.fn, self.heads, planner.width),
                every_position=True,
                same=lambda e: (
                    isinstance(e, ops.HookEdit) and e.fn is self.fn and not bool(e.where[r].any())
                ),
            )
            assert isinstance(edit, ops.HookEdit)
            edit.starts[r] = planner.width - n
            planner.mark(edit, r, None, units)


@dataclass(frozen=True)
class KnockoutOp(RowOp):
    """Remove ``(query, key)`` edges of the listed heads before the softmax."""

    edges: tuple[tuple[int, int], ...] = ()
    every_position = False  # edges of one text's positions

    def add_to(self, planner: Planner, r: int, n: int) -> None:
        """Add this op for batch row ``r`` (``n`` real tokens) to the planner."""
        planner.knock_out(r, n, dict(self.units), self.edges)


@dataclass(frozen=True)
class PathOp(RowOp):
    """Patch edges (sender -> receiver input) from a donor text's sender outputs (or means).

    It claims no site cell; the planner refuses it beside other ops in one batch.
    """

    donor: tuple[int, ...] | None = None  # type: ignore[assignment]
    mask: Any = field(default=None, compare=False)  # [S, R] bool over the edge graph
    means: Any = field(default=None, compare=False)  # EdgeMeans, in place of a donor
    every_position = False  # one text's positions

    def add_to(self, planner: Planner, r: int, n: int) -> None:
        """Add this op for batch row ``r`` (``n`` real tokens) to the planner."""
        planner.patch_paths(r, self.donor, self.mask, self.means)
