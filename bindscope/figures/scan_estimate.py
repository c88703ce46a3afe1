"""The attribution scan's figure and table lines: estimate map beside the verified heads."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from bindscope.figures import markdown as md
from bindscope.figures.style import new_figure, short_label
from bindscope.results.summaries import MissingData


def estimate_figure(label: str, block: dict, size: tuple[float, float]):
    """Heatmap of the estimated effect (verified heads boxed) and estimate vs exact."""
    values = np.array(block["estimate"], dtype=float)
    if values.size == 0 or not np.isfinite(values).any():
        raise MissingData("the estimate map is empty")
    fig, (heat, scatter) = new_figure(size, ncols=2, width_ratios=[3, 2])
    bound = float(np.nanmax(np.abs(values))) or 1.0
    image = heat.imshow(values, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
    fig.colorbar(image, ax=heat, label="estimated log-prob drop")
    for layer, head in block.get("verified", []):
        heat.plot(head, layer, marker="s", ms=7, mfc="none", mec="black", mew=1.0)
    heat.set(xlabel="head", ylabel="layer", title=f"{short_label(label)}: attribution estimate")
    heat.xaxis.set_major_locator(MaxNLocator(integer=True))
    heat.yaxis.set_major_locator(MaxNLocator(integer=True))
    heat.invert_yaxis()
    top = [c for c in block["top"] if c.get("value") is not None]
    est = np.array([c["estimate"] for c in top], dtype=float)
    exact = np.array([c["value"] for c in top], dtype=float)
    low = np.array([c["low"] if c["low"] is not None else c["value"] for c in top], dtype=float)
    high = np.array([c["high"] if c["high"] is not None else c["value"] for c in top], dtype=float)
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
