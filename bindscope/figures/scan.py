"""Head scan: the effect map with significant heads marked, the top heads; attribution estimates."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

from bindscope.figures import markdown as md
from bindscope.figures.head_maps import map_plots, top_table
from bindscope.figures.sections import Section
from bindscope.figures.style import effect_map, intervals, new_figure, short_label, slug
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "Head scan: what each head's ablation costs"
SIZES = {"scan": (12.0, 5.0)}


def _plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    maps = {
        label: need(entry, "metrics", "logprob", where=f"{exp.where} [{label}]")
        for label, entry in exp.models.items()
    }
    unit = (exp.summary or {}).get("unit", "head")
    what = f"{unit} ablated: log-prob drop (clean − ablated)"
    yield from map_plots("scan", maps, "effect", what, SIZES["scan"])
    for label, block in maps.items():
        if "estimate" in block:  # --method attribution: the estimate map and verified heads
            drawn = functools.partial(estimate_figure, label, block, SIZES["scan"])
            yield f"scan_estimate_{slug(label)}", drawn


def _tables(exp: ExperimentResults) -> list[str]:
    lines = []
    correction = (exp.summary or {}).get("correction", "bh")
    for label, entry in exp.models.items():
        lines += [f"**{label}** ({entry.get('n_prompts')} prompts)", ""]
        for metric, block in entry.get("metrics", {}).items():
            lines += [f"Top by {metric} drop ({len(block['significant'])} significant):", ""]
            lines += top_table(block["top"], "effect", correction)
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


def estimate_figure(label: str, block: dict, size: tuple[float, float]):
    """Heatmap of the estimated effect (verified heads boxed) and estimate vs exact."""
    values = np.array(block["estimate"], dtype=float)
    if values.size == 0 or not np.isfinite(values).any():
        raise MissingData("the estimate map is empty")
    fig, (heat, scatter) = new_figure(size, ncols=2, width_ratios=[3, 2])
    title = f"{short_label(label)}: attribution estimate"
    verified = block.get("verified", [])
    effect_map(fig, heat, values, "estimated log-prob drop", title, verified, ("s", 7))
    top = [c for c in block["top"] if c.get("value") is not None]
    est = np.array([c["estimate"] for c in top], dtype=float)
    exact, low, high = intervals(top)
    scatter.errorbar(est, exact, yerr=[exact - low, high - exact], fmt="o", color="black")
    if len(top):
        span = [min(est.min(), low.min()), max(est.max(), high.max())]
        scatter.plot(span, span, color="grey", lw=0.8, ls="--", label="estimate = exact")
        scatter.legend(frameon=False)
    scatter.set(
        xlabel="estimated effect", ylabel="exact effect, 95% CI",
        title=f"{len(top)} verified heads",
    )  # fmt: skip
    caption = (
        f"{short_label(label)}: every head's log-prob drop estimated by attribution patching "
        f"(squares: the {len(top)} heads scanned exactly); right: estimate vs exact effect of "
        "the verified heads."
    )
    return fig, caption


def agreement_lines(block: dict) -> list[str]:
    """The report's lines on how well the estimate matched the verified heads."""
    found = block.get("agreement")
    if not found:
        return []
    spearman = found.get("spearman")
    rho = "n/a (fewer than 3 heads or no spread)" if spearman is None else f"{spearman:.3f}"
    rows = [
        [c["condition"], f"{c['estimate']:.3f}", md.estimate(c), md.pvalue(c.get("p_adjusted"))]
        for c in block["top"]
    ]
    return [
        f"Attribution estimate vs exact ablation on the {found['n_verified']} verified heads: "
        f"Spearman {rho}, same sign {found['sign_agreement']:.0%}, largest |difference| "
        f"{found.get('max_abs_error', float('nan')):.3f}. Adjusted p counts every head "
        "(unverified heads at p = 1).",
        "",
        *md.table(["head", "estimate", "exact effect [95% CI]", "p adjusted"], rows),
    ]


SECTION = Section("scan", TITLE, md.prose("scan"), SIZES, _plots, _tables, order=7)
