"""What ``intervene=``, ``per_row=`` and ``ablate=`` take, and their checked row ops.

Every spec of a call is checked against the model and the texts before any trace runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from bindscope.errors import InterventionError
from bindscope.interventions.flow_specs import SPEC_TYPES, Spec
from bindscope.interventions.head_checks import head_pairs
from bindscope.interventions.rowops import UNIT_SITES, PathOp, RowOp
from bindscope.interventions.specs import RowContext, Zero
from bindscope.protocols import LanguageModel

# ``(layer, head)`` pairs, or ``{layer: [heads]}`` (``ablate=``, a spec's heads).
HeadList = Iterable[Sequence[int]] | Mapping[int, Iterable[int]]
# What ``intervene=`` takes: a spec, a list of specs, or None (``per_row`` entries: head pairs too).
Intervention = Spec | Sequence[Spec] | HeadList | None
# What ``per_row=`` takes: one ``Intervention`` per text, or None.
PerRow = Sequence[Intervention] | None


def as_specs(entry: Intervention, *, option: str = "intervene") -> tuple:
    """One ``intervene``/``ablate``/``per_row`` entry (named by ``option``) as a tuple of specs.

    A list of ``(layer, head)`` pairs is ``Zero`` of them: the ``ablate=`` shortcut (and a
    ``per_row`` entry).
    """
    if entry is None:
        return ()
    if isinstance(entry, SPEC_TYPES):
        return (entry,)
    if isinstance(entry, dict):
        entry = head_pairs(entry)
    if isinstance(entry, (str, bytes)) or not isinstance(entry, Iterable):
        raise InterventionError(
            f"{entry!r} is not an intervention: pass a spec "
            f"({', '.join(t.__name__ for t in SPEC_TYPES)}), a list of specs, or None"
        )
    items = list(entry)
    if not items:
        return ()
    if all(isinstance(x, SPEC_TYPES) for x in items):
        return tuple(items)
    if any(isinstance(x, SPEC_TYPES) for x in items):
        raise InterventionError(
            "an intervention list mixes specs and (layer, head) pairs; wrap the pairs, "
            "e.g. [Zero([(2, 8)]), Patch(...)]"
        )
    if option == "intervene":
        raise InterventionError(
            "intervene= takes specs, not (layer, head) pairs: pass intervene=Zero([...]) "
            "or its shortcut ablate=[...]"
        )
    return (Zero(tuple(items)),)


def resolve_rows(
    model: LanguageModel,
    texts: Sequence,
    *,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
) -> list[tuple[RowOp, ...]]:
    """Check every spec against the model and the texts; one tuple of row ops per text.

    ``ablate``, ``intervene`` and ``per_row[i]`` add up, in that order; two specs on one cell
    (head, or site of a layer) of a text are refused.
    """
    texts = list(texts)
    _check_per_row(per_row, len(texts))
    shared = as_specs(ablate, option="ablate") + as_specs(intervene)
    ctx = RowContext(model, texts)
    out = []
    for i in range(len(texts)):
        specs = shared + (as_specs(per_row[i], option="per_row") if per_row else ())
        row: list[RowOp] = []
        for spec in specs:
            row.extend(spec.row_ops(ctx, i))
        _check_claims(model, row, i)
        out.append(tuple(row))
    return out


def _check_claims(model: LanguageModel, row: list[RowOp], i: int) -> None:
    """Refuse two ops on one cell of a text: one would silently undo or hide the other."""
    paths = [op for op in row if isinstance(op, PathOp)]
    if paths and len(row) > 1:
        other = next((op for op in row if op is not paths[0]), paths[-1])
        raise InterventionError(
            f"{model.name}: text #{i} takes {paths[0].spec} and {other.spec}; a text with a "
            "PathPatch takes no other spec (its receivers' copies of the stream miss other "
            "edits): give one PathPatch with every edge, or use per_row= or separate calls"
        )
    same = one_tensor(model)
    owner: dict[tuple[str, int, int], tuple[RowOp, tuple[str, int, int]]] = {}
    for op in row:
        for cell in op.cells():
            other, first = owner.setdefault(same(cell), (op, cell))
            if other is op or (other.composes and op.composes):
                continue
            where = _where(cell)
            if first != cell:
                where += f" (one tensor with {_where(first)})"
            raise InterventionError(
                f"{model.name}: text #{i}: {where} is in both {other.spec} and {op.spec}; one "
                "spec per head (or site) and text (the later edit would hide the earlier): "
                "drop it from one of them, or run them in separate calls"
            )


def _where(cell: tuple[str, int, int]) -> str:
    site, layer, unit = cell
    if site == "head_out":
        return f"head {(layer, unit)}"
    return f"{site} {(layer, unit)}" if site in UNIT_SITES[1:] else f"{site} of layer {layer}"


def one_tensor(model: LanguageModel) -> Callable[[tuple[str, int, int]], tuple[str, int, int]]:
    """The cell a ``(site, layer, unit)`` cell is one tensor with, read off the site table.

    Two sites at one location are one tensor, and ``resid_pre`` of layer L+1 is
    ``resid_post`` of layer L.
    """
    first: dict[tuple, str] = {}
    name = {site: first.setdefault(tuple(where), site) for site, where in model.sites.items()}
    layer_input = first.get(("", "input", 0))
    layer_output = first.get(("", "output", 0))

    def same(cell: tuple[str, int, int]) -> tuple[str, int, int]:
        site, layer, unit = cell
        site = name.get(site, site)
        if site == layer_input and layer > 0 and layer_output is not None:
            return layer_output, layer - 1, unit
        return site, layer, unit

    return same


def _check_per_row(per_row, n_texts: int) -> None:
    """``per_row`` must have one entry per text (raises ``InterventionError``)."""
    if per_row is not None and (isinstance(per_row, SPEC_TYPES) or len(per_row) != n_texts):
        count = 1 if isinstance(per_row, SPEC_TYPES) else len(per_row)
        raise InterventionError(
            f"per_row has {count} entries for {n_texts} texts; give one spec, list of "
            "specs or None per text (or use intervene= for the same spec on every text)"
        )
