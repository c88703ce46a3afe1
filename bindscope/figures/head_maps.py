"""An ``[L, H]`` map of per-head effects with the largest ones beside it (scan, patching)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from matplotlib.figure import Figure

from bindscope.figures import markdown as md
from bindscope.figures.style import effect_map, intervals, new_figure, short_label, slug
from bindscope.results.summaries import MissingData, layer_rows

TOP = 10  # the largest effects shown beside a map and in its table


def heads_figure(
    label: str,
    effect: list,
    significant: list,
    top: list[dict],
    what: str,
    size: tuple[float, float],
) -> tuple[Figure, str]:
    """Heatmap ``[L, H]`` of ``effect`` (significant cells marked) and top cells with CIs."""
    values, significant = layer_rows(effect, significant)
    if values.size == 0 or np.isnan(values).all():
        raise MissingData("the effect map is empty")
    fig, (heat, bars) = new_figure(size, ncols=2, width_ratios=[3, 2])
    title = f"{short_label(label)}: {what}"
    effect_map(fig, heat, values, what.split(": ", 1)[-1], title, significant, ("o", 4))
    shown = top[:TOP][::-1]
    y = np.arange(len(shown))
    mids, lows, highs = intervals(shown)
    bars.errorbar(mids, y, xerr=[mids - lows, highs - mids], fmt="o", color="black", capsize=3)
    bars.axvline(0, color="grey", lw=0.8)
    names = [f"{c['condition']}{' *' if c.get('significant') else ''}" for c in shown]
    bars.set_yticks(y, names)
    bars.set(
        xlabel="effect, 95% CI (* adjusted p < 0.05)", title=f"the {len(shown)} largest effects"
    )
    caption = (
        f"{short_label(label)}: {what}; circles mark adjusted p < 0.05 "
        f"({len(significant)} cells). Right: the largest effects with 95% paired bootstrap CIs."
    )
    return fig, caption


def top_table(top: list[dict], what: str, correction: str) -> list[str]:
    """The largest effects as a report table: condition, ``what`` [95% CI], p, adjusted p."""
    rows = [
        [c["condition"], md.estimate(c), md.pvalue(c.get("p")), md.pvalue(c.get("p_adjusted"))]
        for c in top[:TOP]
    ]
    return md.table(["condition", f"{what} [95% CI]", "p", f"p ({correction})"], rows)


def map_plots(
    stem: str, maps: dict[str, dict], field: str, what: str, size: tuple[float, float]
) -> Iterator[tuple[str, Callable[[], tuple[Figure, str]]]]:
    """One ``heads_figure`` per model of ``maps`` (its ``field`` map, ``significant``, ``top``)."""

    def builder(label: str, block: dict) -> Callable[[], tuple[Figure, str]]:
        return lambda: heads_figure(
            label, block[field], block["significant"], block["top"], what, size
        )

    for label, block in maps.items():
        yield f"{stem}_{slug(label)}", builder(label, block)


__all__ = ["heads_figure", "map_plots", "top_table"]
