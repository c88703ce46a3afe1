"""Binding: per-head mean BSI heatmaps with the top-k heads marked, and the EB* table."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from matplotlib import patheffects
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from bindscope.figures import markdown as md
from bindscope.figures.section import Section
from bindscope.figures.style import HEATMAP_CMAP, new_figure, per_model, short_label
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "Binding (EB*)"
#: Inches per figure kind; at DPI 150 each gives whole pixels.
SIZES = {"binding_bsi": (7.0, 6.0)}
HOW_TO_READ = (
    "BSI is the mean attention probability that later tokens of a multi-token term put on "
    "its earlier tokens, for one head; EB at a layer is the best head's BSI minus the "
    "layer's mean BSI, and EB* is the largest EB over layers (0 to 1; the normalised value "
    "divides by 1 - 1/H so models with different head counts compare). Intervals are 95% "
    "bootstrap CIs over prompts. A prompt whose term is a single token has no BSI and is "
    "counted as skipped, not as zero. The heatmap shows the mean BSI of every head; the "
    "boxed, numbered heads are the top-k by mean BSI, the set C5 ablates when it ranks on "
    "the same prompts."
)


def plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    """The binding figures: (file stem, builder) pairs, drawn only when asked."""
    return per_model(exp.models, exp.folder, "binding_bsi", bsi_heatmap)


def bsi_heatmap(label: str, entry: dict, *, where: str = "summary"):
    """Mean BSI ``[layer, head]`` with the top heads boxed and numbered by rank."""
    bsi = np.array(need(entry, "mean_bsi", where=where), dtype=float)  # [L, H]
    if bsi.ndim != 2 or bsi.size == 0:
        raise MissingData(f"{where}: mean_bsi is not a [layer][head] table")
    top = need(entry, "top_heads", where=where)
    fig, ax = new_figure(SIZES["binding_bsi"])
    image = ax.imshow(bsi, origin="lower", aspect="auto", cmap=HEATMAP_CMAP, interpolation="none")
    fig.colorbar(image, ax=ax, label="mean BSI (attention probability, 0–1)")
    for rank, (layer, head) in enumerate(top, start=1):
        # white over black outline: visible on the dark and the light end of the map
        for colour, width in (("black", 3.0), ("white", 1.4)):
            ax.add_patch(
                Rectangle(
                    (head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor=colour, linewidth=width
                )
            )
        text = ax.text(head, layer, str(rank), ha="center", va="center", color="white", fontsize=7)
        text.set_path_effects([patheffects.withStroke(linewidth=2, foreground="black")])
    ax.set_xlabel("head index (0-based)")
    ax.set_ylabel("layer (0 = first)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    n = entry.get("n")
    ax.set_title(f"{short_label(label)}: mean BSI per head (n = {n} prompts)")
    caption = (
        f"{label}: mean BSI per head over {n} prompts with a 2+ token span; boxes mark the "
        f"top-{len(top)} heads by mean BSI (number = rank)."
    )
    return fig, caption


def tables(exp: ExperimentResults) -> list[str]:
    """The report's binding tables, as Markdown lines."""
    rows = []
    for label, entry in exp.models.items():
        rows.append(
            [
                label,
                *md.nums(entry, "n_layers", "n_heads", "n", "n_skipped"),
                md.estimate(entry.get("eb_star")),
                md.estimate(entry.get("eb_star_norm")),
                md.heads(entry.get("top_heads")),
            ]
        )
    header = ["model", "layers", "heads", "n", "skipped", "EB* [95% CI]", "EB* norm [95% CI]"]
    return md.table([*header, "top heads (by mean BSI)"], rows, left=1)


SECTION = Section("binding", TITLE, HOW_TO_READ, SIZES, plots, tables, order=1)

__all__ = ["HOW_TO_READ", "SECTION", "SIZES", "TITLE", "bsi_heatmap", "plots", "tables"]
