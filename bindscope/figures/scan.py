"""Head scan: the effect heatmap with significant heads marked, and the top heads with CIs."""

from __future__ import annotations

from collections.abc import Iterator

from bindscope.figures import markdown as md
from bindscope.figures.head_maps import map_plots, top_rows
from bindscope.figures.scan_estimate import agreement_lines, estimate_figure
from bindscope.figures.section import Section
from bindscope.figures.style import slug
from bindscope.results.summaries import ExperimentResults, need

TITLE = "Head scan: what each head's ablation costs"
#: Inches per figure kind; at DPI 150 each gives whole pixels.
SIZES = {"scan": (12.0, 5.0)}


def plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    """The head-scan figures: (file stem, builder) pairs, drawn only when asked."""
    where = str(exp.folder / "summary.json")
    maps = {
        label: need(entry, "metrics", "logprob", where=f"{where} [{label}]")
        for label, entry in exp.models.items()
    }
    unit = (exp.summary or {}).get("unit", "head")
    what = f"{unit} ablated: log-prob drop (clean − ablated)"
    yield from map_plots("scan", maps, "effect", what, SIZES["scan"])
    for label, block in maps.items():
        if "estimate" in block:  # --method attribution: the estimate map and verified heads
            yield (
                f"scan_estimate_{slug(label)}",
                lambda label=label, block=block: estimate_figure(label, block, SIZES["scan"]),
            )


def tables(exp: ExperimentResults) -> list[str]:
    """The report's head-scan tables, as Markdown lines."""
    lines = []
    correction = (exp.summary or {}).get("correction", "bh")
    for label, entry in exp.models.items():
        lines += [f"**{label}** ({entry.get('n_prompts')} prompts)", ""]
        for metric, block in entry.get("metrics", {}).items():
            lines += [
                f"Top by {metric} drop ({len(block['significant'])} significant):",
                "",
                *md.table(
                    ["condition", "effect [95% CI]", "p", f"p ({correction})"],
                    top_rows(block["top"]),
                ),
            ]
        lines += agreement_lines(entry.get("metrics", {}).get("logprob", {}))
        corr = entry.get("bsi_vs_effect")
        if corr:
            lines += [
                f"BSI vs log-prob effect ({corr.get('effect', 'exact')}), Spearman over heads: "
                f"{md.estimate(corr)} "
                f"({corr['n_prompts']} prompts, {corr['n_cells']} heads).",
                "",
            ]
    return lines


SECTION = Section("scan", TITLE, md.prose("scan"), SIZES, plots, tables, order=7)
