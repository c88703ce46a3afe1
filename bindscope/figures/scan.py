"""Head scan: the effect heatmap with significant heads marked, and the top heads with CIs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from matplotlib.ticker import MaxNLocator

from bindscope.figures import markdown as md
from bindscope.figures.scan_estimate import agreement_lines, estimate_figure
from bindscope.figures.style import new_figure, short_label, slug
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "Head scan: what each head's ablation costs"
KINDS = ("scan",)
HOW_TO_READ = (
    "Each head (or layer) is ablated alone. Its effect is the clean score minus the ablated "
    "score, paired by prompt (log-prob: the correct choice's mean log-probability per token; "
    "accuracy: the fraction of prompts answered correctly), averaged over prompts with a 95% "
    "paired bootstrap CI. p is a sign-flip permutation test per head, adjusted across all "
    "heads (Benjamini-Hochberg unless the summary says Holm); heads with adjusted p < 0.05 "
    "are marked. The BSI row is the Spearman correlation of the mean-BSI map with the "
    "log-prob effect map, with a bootstrap CI over prompts: whether heads that bind terms "
    "are the heads behaviour needs."
)


def plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    """The head-scan figures: (file stem, builder) pairs, drawn only when asked."""
    where = str(exp.folder / "summary.json")
    unit = (exp.summary or {}).get("unit", "head")
    for label, entry in exp.models.items():
        block = need(entry, "metrics", "logprob", where=f"{where} [{label}]")
        yield (
            f"scan_{slug(label)}",
            lambda label=label, block=block: heads_figure(
                label, block["effect"], block["significant"], block["top"],
                f"{unit} ablated: log-prob drop (clean − ablated)",
            ),
        )  # fmt: skip
        if "estimate" in block:  # --method attribution: the estimate map and verified heads
            yield (
                f"scan_estimate_{slug(label)}",
                lambda label=label, block=block: estimate_figure(label, block),
            )


def heads_figure(label: str, effect, significant, top, what: str, *, limit: int = 10):
    """Heatmap ``[L, H]`` of ``effect`` (significant cells marked) and top cells with CIs."""
    values = np.array([[np.nan if v is None else v for v in row] for row in effect], float)
    if values.size == 0 or np.isnan(values).all():
        raise MissingData("the effect map is empty")
    fig, (heat, bars) = new_figure("scan", ncols=2, width_ratios=[3, 2])
    bound = float(np.nanmax(np.abs(values))) or 1.0
    image = heat.imshow(values, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
    fig.colorbar(image, ax=heat, label=what.split(": ", 1)[-1])
    for layer, head in significant:
        heat.plot(head, layer, marker="o", ms=4, mfc="none", mec="black", mew=1.0)
    heat.set(xlabel="head", ylabel="layer", title=f"{short_label(label)}: {what}")
    heat.xaxis.set_major_locator(MaxNLocator(integer=True))
    heat.yaxis.set_major_locator(MaxNLocator(integer=True))
    heat.invert_yaxis()
    shown = top[:limit][::-1]
    y = np.arange(len(shown))
    mids = np.array([c["value"] for c in shown], float)
    lows = np.array([c["low"] if c["low"] is not None else c["value"] for c in shown], float)
    highs = np.array([c["high"] if c["high"] is not None else c["value"] for c in shown], float)
    bars.errorbar(mids, y, xerr=[mids - lows, highs - mids], fmt="o", color="black", capsize=3)
    bars.axvline(0, color="grey", lw=0.8)
    names = [f"{c['condition']}{' *' if c.get('significant') else ''}" for c in shown]
    bars.set_yticks(y, names)
    bars.set(xlabel="effect, 95% CI (* adjusted p < 0.05)", title=f"top {len(shown)}")
    caption = (
        f"{short_label(label)}: {what}; circles mark adjusted p < 0.05 "
        f"({len(significant)} cells). Right: the largest effects with 95% paired bootstrap CIs."
    )
    return fig, caption


def _top_rows(top, limit: int = 10):
    return [
        [c["condition"], md.estimate(c), md.pvalue(c.get("p")), md.pvalue(c.get("p_adjusted"))]
        for c in top[:limit]
    ]


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
                    _top_rows(block["top"]),
                ),
            ]
        lines += agreement_lines(entry.get("metrics", {}).get("logprob", {}))
        corr = entry.get("bsi_vs_effect")
        if corr:
            lines += [
                f"BSI vs log-prob effect, Spearman over heads: {md.estimate(corr)} "
                f"({corr['n_prompts']} prompts, {corr['n_cells']} heads).",
                "",
            ]
    return lines


__all__ = ["HOW_TO_READ", "KINDS", "TITLE", "heads_figure", "plots", "tables"]
