"""Shared look of every figure: fixed sizes, Okabe-Ito colours, hatches, markers, saving.

Figures are plain ``matplotlib.figure.Figure``s, never pyplot: headless, a notebook untouched.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

DPI = 150  # every section's sizes (inches) give whole pixels at this DPI

# Okabe & Ito (2008): distinguishable with the common colour-vision deficiencies.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}

# One colour + hatch + marker per role, so every series also reads in greyscale.
CONDITION_STYLE = {
    "baseline": {"color": "#BBBBBB", "hatch": "", "marker": "o"},
    "top": {"color": OKABE_ITO["vermillion"], "hatch": "///", "marker": "v"},
    "bottom": {"color": OKABE_ITO["blue"], "hatch": "\\\\\\", "marker": "^"},
    "random": {"color": OKABE_ITO["sky_blue"], "hatch": "..", "marker": "s"},
}
SERIES: list[dict[str, Any]] = [
    {"color": OKABE_ITO["blue"], "marker": "o", "linestyle": "-"},
    {"color": OKABE_ITO["vermillion"], "marker": "s", "linestyle": "--"},
    {"color": OKABE_ITO["green"], "marker": "^", "linestyle": "-."},
    {"color": OKABE_ITO["purple"], "marker": "D", "linestyle": ":"},
    {"color": OKABE_ITO["orange"], "marker": "v", "linestyle": "-"},
]
#: What a section's ``plots`` yields: (file stem, builder of (figure, caption)) pairs.
Plots = Iterator[tuple[str, Callable[[], tuple[Figure, str]]]]
HEATMAP_CMAP = "cividis"  # lightness rises monotonically: readable in greyscale

RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "hatch.linewidth": 0.8,
    "pdf.fonttype": 42,  # TrueType in the PDF: text stays editable in a paper's sources
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def new_figure(size: tuple[float, float], **subplots: Any) -> tuple[Figure, Any]:
    """A figure of a fixed ``size`` (inches) and its axes (``Figure.subplots`` options)."""
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    return fig, fig.subplots(**subplots)


def figure_legend(fig: Figure, axes: Iterable[Any], *, ncols: int = 4) -> None:
    """One legend above all panels (unique labels), so it never covers data."""
    unique: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            unique.setdefault(label, handle)
    if unique:
        fig.legend(
            list(unique.values()),
            list(unique.keys()),
            loc="outside upper center",
            ncols=min(ncols, len(unique)),
            frameon=False,
        )


def heatmap(ax: Any, values: Any, **options: Any) -> Any:
    """An ``[L, H]`` map in the shared colour map, layer 0 at the bottom; returns its image."""
    options = {"origin": "lower", "aspect": "auto", "interpolation": "none", **options}
    return ax.imshow(values, cmap=HEATMAP_CMAP, **options)


def integer_ticks(ax: Any) -> None:
    """Whole-number ticks on both axes (layers and heads)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def interval(
    ax: Any, y: float, est: Mapping | None, *, filled: bool = True, lw: float = 1.6, **style: Any
) -> None:
    """An estimate at ``y``: interval as a line, value as a marker (open unless ``filled``)."""
    if not est or est.get("value") is None:
        return
    if est.get("low") is not None and est.get("high") is not None:
        ax.hlines(y, est["low"], est["high"], color=style["color"], linewidth=lw)
    face = style["color"] if filled else "white"
    style = {"markersize": 7, "markerfacecolor": face, "markeredgewidth": 1.4, **style}
    ax.plot([est["value"]], [y], **{**style, "linestyle": "none"})


def effect_map(
    fig: Figure, heat: Any, values: np.ndarray, what: str, title: str, cells: list, mark: tuple
) -> None:
    """A ``[L, H]`` map diverging from 0 (layer 0 on top), ``cells`` ringed by ``mark``."""
    bound = float(np.nanmax(np.abs(values))) or 1.0
    image = heat.imshow(values, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
    fig.colorbar(image, ax=heat, label=what)
    for layer, head in cells:
        heat.plot(head, layer, marker=mark[0], ms=mark[1], mfc="none", mec="black", mew=1.0)
    heat.set(xlabel="head", ylabel="layer", title=title)
    integer_ticks(heat)
    heat.invert_yaxis()


def columns(rows: Sequence[Mapping | None], *keys: str) -> list[np.ndarray]:
    """One float array per key over ``rows``, NaN where a row or its value is missing."""
    return [np.array([(row or {}).get(key) for row in rows], float) for key in keys]


def intervals(cells: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values, lows and highs of effect cells (a missing bound at the value)."""
    value, low, high = columns(cells, "value", "low", "high")
    return value, np.where(np.isnan(low), value, low), np.where(np.isnan(high), value, high)


def rc_context() -> Any:
    """The figure style, applied only while a figure is built and saved."""
    return matplotlib.rc_context(cast(Any, RC))


def save(fig: Figure, out_dir: Path, name: str) -> tuple[Path, Path]:
    """Write ``name.png`` and ``name.pdf`` at the fixed size (no tight bbox: sizes stay exact)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{name}.png", out_dir / f"{name}.pdf"
    fig.savefig(png, dpi=DPI, format="png", metadata={"Software": None})
    fig.savefig(pdf, dpi=DPI, format="pdf", metadata={"CreationDate": None})
    return png, pdf


def per_model(
    models: Mapping[str, dict],
    where: str,
    stem: str,
    build: Callable[..., tuple[Figure, str]],
    **options: Any,
) -> Plots:
    """One figure per model: ``<stem>_<slug>``, drawn by ``build(label, entry, where=, ...)``."""
    for label, entry in models.items():
        drawn = functools.partial(build, label, entry, where=f"{where} [{label}]", **options)
        yield f"{stem}_{slug(label)}", drawn


def model_plots(*figures: tuple[str, Callable[..., tuple[Figure, str]]]) -> Callable[[Any], Plots]:
    """A section's ``plots``: per ``(stem, build)``, a ``per_model`` figure of each model."""
    return lambda exp: (
        plot for stem, build in figures for plot in per_model(exp.models, exp.where, stem, build)
    )


def slug(label: str) -> str:
    """A file-name-safe form of a model label (``org/name@rev`` -> ``org-name-rev``)."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", label).strip("-") or "model"


def short_label(label: str) -> str:
    """A model label for axes: the Hub name without its organisation, ``@main`` dropped."""
    name, _, revision = label.partition("@")
    name = name.rstrip("/").rsplit("/", 1)[-1]
    return name if revision in ("", "main") else f"{name}@{revision}"


__all__ = [
    "CONDITION_STYLE",
    "DPI",
    "HEATMAP_CMAP",
    "OKABE_ITO",
    "SERIES",
    "columns",
    "effect_map",
    "figure_legend",
    "heatmap",
    "integer_ticks",
    "interval",
    "intervals",
    "model_plots",
    "new_figure",
    "per_model",
    "rc_context",
    "save",
    "short_label",
    "slug",
]
