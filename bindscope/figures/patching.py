"""Activation patching: the recovery heatmap with significant heads marked, top heads."""

from __future__ import annotations

from collections.abc import Iterator

from bindscope.figures import markdown as md
from bindscope.figures.scan import _top_rows, heads_figure
from bindscope.figures.style import slug
from bindscope.results.summaries import ExperimentResults

TITLE = "Activation patching: which heads carry the clean answer"
KINDS = ("patching",)
HOW_TO_READ = (
    "Each head's (or layer's) output is copied from the clean prompt's run into the "
    "corrupted prompt's run. Recovery is (patched − corrupted) / (clean − corrupted) of the "
    "pair's metric (the target's mean log-probability, or a clean-minus-corrupted answer "
    "logit difference): 1 means the head alone restores the clean behaviour, 0 that it "
    "carries none of the difference. Means over pairs with 95% paired bootstrap CIs; p is a "
    "sign-flip permutation test of recovery against 0, adjusted across heads; pairs whose "
    "clean and corrupted metrics are equal are left out."
)


def plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    """The activation-patching figures: (file stem, builder) pairs, drawn only when asked."""
    for label, entry in exp.models.items():
        yield (
            f"patching_{slug(label)}",
            lambda label=label, entry=entry: heads_figure(
                label, entry["recovery"], entry["significant"], entry["top"],
                f"{(exp.summary or {}).get('unit', 'head')} patched: recovery",
            ),
        )  # fmt: skip


def tables(exp: ExperimentResults) -> list[str]:
    """The report's activation-patching tables, as Markdown lines."""
    lines = []
    correction = (exp.summary or {}).get("correction", "bh")
    for label, entry in exp.models.items():
        lines += [
            f"**{label}**: {entry['n_pairs']} pairs ({entry['n_pairs_no_gap']} without a "
            f"gap, {entry['pairs_skipped']} of unequal length skipped), "
            f"{len(entry['significant'])} significant",
            "",
            *md.table(
                ["condition", "recovery [95% CI]", "p", f"p ({correction})"],
                _top_rows(entry["top"]),
            ),
        ]
    return lines


__all__ = ["HOW_TO_READ", "KINDS", "TITLE", "plots", "tables"]
