"""The attribution scan's figure and table lines: estimate map beside the verified heads."""

from __future__ import annotations

import numpy as np

from bindscope.figures import markdown as md
from bindscope.figures.style import effect_map, intervals, new_figure, short_label
from bindscope.results.summaries import MissingData


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


__all__ = ["agreement_lines", "estimate_figure"]
