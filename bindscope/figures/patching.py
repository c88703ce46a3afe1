"""Activation patching: the recovery heatmap with significant heads marked, top heads."""

from __future__ import annotations

from collections.abc import Iterator

from bindscope.figures import markdown as md
from bindscope.figures.head_maps import map_plots, top_table
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults

TITLE = "Activation patching: which heads carry the clean answer"
SIZES = {"patching": (12.0, 5.0)}


def _plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    what = f"{(exp.summary or {}).get('unit', 'head')} patched: recovery"
    return map_plots("patching", exp.models, "recovery", what, SIZES["patching"])


def _tables(exp: ExperimentResults) -> list[str]:
    lines = []
    correction = (exp.summary or {}).get("correction", "bh")
    for label, entry in exp.models.items():
        lines += [
            f"**{label}**: {entry['n_pairs']} pairs ({entry['n_pairs_no_gap']} without a "
            f"gap, {entry['pairs_skipped']} of unequal length skipped), "
            f"{len(entry['significant'])} significant",
            "",
            *top_table(entry["top"], "recovery", correction),
        ]
    return lines


SECTION = Section("patching", TITLE, md.prose("patching"), SIZES, _plots, _tables, order=8)
