"""Row ops: one checked intervention of one text, and the `Planner` they add themselves to.

A row op knows which cells it claims (two specs on one cell of a text are refused) and
how it adds itself to a batch's plan (`add_to`); `plan.plan_batch` drives them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bindscope.errors import InterventionError
from bindscope.families import HEAD_SITES
from bindscope.interventions import ops
from bindscope.interventions.graph import edge_geometry, edge_graph
from bindscope.interventions.trace.features import features_key
from bindscope.protocols import LanguageModel

__all__ = [
    "AddOp",
    "DonorOp",
    "HookOp",
    "KnockoutOp",
    "PathOp",
    "Planner",
    "ReplaceOp",
    "RowOp",
    "attention_call",
    "unit_shape",
]

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
        offset = planner.width - n  # left padding
        q = torch.tensor([offset + a for a, _ in self.edges])
        k = torch.tensor([offset + b for _, b in self.edges])
        shape = (planner.n_rows, planner.model.n_heads, planner.width, planner.width)
        for layer, heads in self.units:
            removed = planner.knockout.setdefault(layer, torch.zeros(shape, dtype=torch.bool))
            removed[r, torch.tensor(heads, dtype=torch.long)[:, None], q, k] = True


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
        means, paths = planner.path_means, planner.paths
        if r in paths:
            raise InterventionError(
                f"{planner.model.name}: two PathPatch specs on one text; give one PathPatch "
                "with every edge (its edges are patched together)"
            )
        if self.means is not None and all(m is not self.means for m in means):
            means.append(self.means)
        if (
            len(means) > 1
            or (means and self.donor is not None)
            or (means and any(d is not None for d, _ in paths.values()))
        ):
            raise InterventionError(
                f"{planner.model.name}: the texts of one batch take PathPatch with different "
                "means, or means beside a source; run them in separate calls"
            )
        paths[r] = (self.donor, self.mask)


def attention_call(model: LanguageModel, needed: object = True) -> tuple[str, int] | None:
    """The attention call's ``(label, mask index)`` where ``needed`` (knockout, q, k, v, scores)."""
    if not needed:
        return None
    try:
        return model.knockout_site
    except RuntimeError as exc:
        raise InterventionError(
            f"{model.name} ({model.family}): Knockout, q, k, v and scores act at the attention "
            f"function's call, which this model's attention forward does not make ({exc})"
        ) from None


class Planner:
    """Accumulates each row's ops (`RowOp.add_to`) into the edits and masks of one batch's plan."""

    def __init__(
        self, model: LanguageModel, n_rows: int, width: int, donor_ids: dict[tuple[int, ...], int]
    ) -> None:
        self.model, self.n_rows, self.width = model, n_rows, width
        self.donor_ids = donor_ids
        self.edits: dict[tuple[str, int], list[ops.Edit]] = {}
        self.knockout: dict[int, torch.Tensor] = {}
        self.paths: dict[int, tuple[tuple[int, ...] | None, np.ndarray]] = {}
        self.path_means: list = []  # the EdgeMeans of mean-ablating path patches

    def columns(self, n: int, positions: tuple[int, ...] | None, donor: int | None = None):
        """Padded columns of a row with ``n`` real tokens (None: every position).

        With an end-aligned donor of ``donor`` tokens, only columns the donor has.
        """
        if positions is None and donor is None:
            return None
        if positions is None:
            return list(range(self.width - min(n, donor or n), self.width))
        lowest = n - donor if donor is not None else 0
        return [self.width - n + p for p in positions if p >= lowest]

    def edit(
        self,
        site: str,
        layer: int,
        make: Callable[..., ops.Edit],
        *,
        every_position: bool,
        same: Callable[..., bool],
        dictionary: ops.TraceDictionary | None = None,
    ) -> ops.Edit:
        """The edit of ``(site, layer)`` made by ``make(where)``, shared when ``same`` matches.

        ``same(edit)``: an existing edit can take another row's cells (the same kind and value).
        With a ``dictionary`` the edit is wrapped in a ``FeatureEdit``; the inner one is returned.
        """
        entries = self.edits.setdefault((site, layer), [])
        for entry in entries:
            inner = getattr(entry, "inner", entry)
            if (
                entry.every_position == every_position
                and getattr(entry, "dictionary", None) is dictionary
                and same(inner)
            ):
                return inner
        width = 1 if every_position else self.width
        units = unit_shape(self.model, site)[0]
        if dictionary is not None:
            units = int(dictionary.W_enc.shape[1])
        where = torch.zeros(self.n_rows, width, units, dtype=torch.bool)
        entry = make(where)
        entry.every_position = every_position
        entries.append(entry if dictionary is None else ops.FeatureEdit(entry, dictionary, layer))
        return entry

    @staticmethod
    def mark(edit: ops.Edit, r: int, columns: list[int] | None, units: Iterable[int]) -> None:
        """Set row ``r``'s cells of ``edit`` (``columns`` None: the every-position column)."""
        rows = torch.tensor([0] if columns is None else columns, dtype=torch.long)
        edit.where[r, rows[:, None], list(units)] = True

    def plan(self, donors: dict[str, torch.Tensor] | None) -> ops.TracePlan:
        """The `ops.TracePlan` of everything added."""
        path, n_donors = None, 0 if donors is None else donors["input_ids"].shape[0]
        if self.paths:  # other texts' edits act on their own rows (resolve_rows keeps them apart)
            if self.knockout:
                raise InterventionError(
                    f"{self.model.name}: Knockout and PathPatch in one batch: a knockout of "
                    "a batch with scratch rows is not planned; run them in separate calls"
                )
            path = self._path(n_donors)
        order = list(self.model.sites)
        donor_keys = sorted(
            {
                edit.key
                for entries in self.edits.values()
                for edit in (getattr(entry, "inner", entry) for entry in entries)
                if isinstance(edit, ops.DonorEdit)
            },
            key=lambda key: (key[1], order.index(key[0])),
        )
        knockout, knockout_batch = self.knockout, {}
        if donors is not None:  # the whole batch at once, donor rows (first) untouched
            knockout = {}
            knockout_batch = {
                layer: torch.cat([removed.new_zeros(n_donors, *removed.shape[1:]), removed])
                for layer, removed in self.knockout.items()
            }
        patterns = self._pattern_batch(n_donors)
        at_call = any(self.model.sites[name][1] == "call" for name, _ in self.edits)
        site = attention_call(self.model, self.knockout or patterns or at_call)
        return ops.TracePlan(
            self.edits, donor_keys, knockout, knockout_batch, site, rows=self.n_rows, path=path,
            pattern_batch=patterns,
        )  # fmt: skip

    def _pattern_batch(self, n_donors: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """``{layer: (where, donor)}`` ``[B, H, W]`` of the pattern patches, donor rows first."""
        out = {}
        for (site, layer), entries in self.edits.items():
            if site != "pattern":
                continue
            shape = (n_donors + self.n_rows, self.model.n_heads, self.width)
            where = torch.zeros(shape, dtype=torch.bool)
            donor = torch.zeros(shape, dtype=torch.long)
            for edit in entries:
                assert isinstance(edit, ops.DonorEdit)  # only Patch reaches the pattern site
                cells = edit.where.transpose(1, 2)  # [b, H, W]
                where[n_donors:] |= cells
                rows = edit.donor_row[:, None, None].expand_as(cells)
                donor[n_donors:][cells] = rows[cells]
            out[layer] = (where, donor)
        return out

    def _path(self, n_donors: int) -> ops.PathPlan:
        """The `ops.PathPlan` of the rows' patched edges."""
        graph = edge_graph(self.model)
        full = np.zeros((self.n_rows, *graph.valid.shape), bool)  # [b, S, R]
        donor_row = torch.zeros(self.n_rows, dtype=torch.long)
        for r, (donor, mask) in self.paths.items():
            full[r] = mask
            if donor is not None:
                donor_row[r] = self.donor_ids[donor]
        anywhere = np.asarray(full.any(0))
        used = np.nonzero(anywhere.any(0))[0]  # receivers with a patched edge
        weights = torch.from_numpy(full[:, :, used].transpose(0, 2, 1).astype(np.float32))
        first_head, mlps = graph.sending(anywhere, self.model.n_heads)
        at, fills, logits = graph.receiving(full, used)
        slots = max([len(rows) for rows in fills.values()] + [1 if at else 0])
        fill = {layer: [torch.tensor(row) for row in rows] for layer, rows in fills.items()}
        return ops.PathPlan(
            edge_geometry(self.model), n_donors, self.n_rows, slots, donor_row, weights,
            first_head, mlps, at, fill, logits,
            self.path_means[0].trace_means() if self.path_means else None,
        )  # fmt: skip
