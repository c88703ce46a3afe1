"""Binding: per-head mean BSI heatmaps with the top-k heads marked, and the EB* table."""

from __future__ import annotations

import numpy as np
from matplotlib import patheffects
from matplotlib.patches import Rectangle

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "Binding (EB*)"
SIZES = {"binding_bsi": (7.0, 6.0)}
COLUMNS = (
    ("layers", md.num, "n_layers"),
    ("heads", md.num, "n_heads"),
    ("n", md.num, "n"),
    ("skipped", md.num, "n_skipped"),
    ("EB* [95% CI]", md.estimate, "eb_star"),
    ("EB* norm [95% CI]", md.estimate, "eb_star_norm"),
    ("top heads (by mean BSI)", md.heads, "top_heads"),
)


def bsi_heatmap(label: str, entry: dict, *, where: str = "summary"):
    """Mean BSI ``[layer, head]`` with the top heads boxed and numbered by rank."""
    bsi = np.array(need(entry, "mean_bsi", where=where), dtype=float)  # [L, H]
    if bsi.ndim != 2 or bsi.size == 0:
        raise MissingData(f"{where}: mean_bsi is not a [layer][head] table")
    top = need(entry, "top_heads", where=where)
    fig, ax = style.new_figure(SIZES["binding_bsi"])
    image = style.heatmap(ax, bsi)
    fig.colorbar(image, ax=ax, label="mean BSI (attention probability, 0–1)")
    for rank, (layer, head) in enumerate(top, start=1):
        # white over black outline: visible on the dark and the light end of the map
        for colour, width in (("black", 3.0), ("white", 1.4)):
            box = Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, ec=colour, lw=width)
            ax.add_patch(box)
        text = ax.text(head, layer, str(rank), ha="center", va="center", color="white", fontsize=7)
        text.set_path_effects([patheffects.withStroke(linewidth=2, foreground="black")])
    ax.set(xlabel="head index (0-based)", ylabel="layer (0 = first)")
    style.integer_ticks(ax)
    n = entry.get("n")
    ax.set_title(f"{style.short_label(label)}: mean BSI per head (n = {n} prompts)")
    caption = (
        f"{label}: mean BSI per head over {n} prompts with a 2+ token span; boxes mark the "
        f"top-{len(top)} heads by mean BSI (number = rank)."
    )
    return fig, caption


def _tables(exp: ExperimentResults) -> list[str]:
    return md.model_table(exp.models, COLUMNS)


plots = style.model_plots(("binding_bsi", bsi_heatmap))
SECTION = Section("binding", TITLE, md.prose("binding"), SIZES, plots, _tables, order=1)
