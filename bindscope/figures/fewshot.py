"""Few-shot and paraphrase prompting: change in behaviour from zero-shot, per term."""

from __future__ import annotations

import functools

import numpy as np

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "Few-shot and paraphrase prompting"
SIZES = {"fewshot": (8.0, 9.0)}
CONDITIONS = ("few_shot", "paraphrase")
_in_points = functools.partial(md.estimate, digits=1)
COLUMNS = (
    ("zero-shot", md.num, "conditions", "zero_shot"),
    ("few-shot", md.num, "conditions", "few_shot"),
    ("paraphrase", md.num, "conditions", "paraphrase"),
    ("few-shot delta, points [95% CI]", _in_points, "delta_points", "few_shot"),
    ("p", md.pvalue, "test", "few_shot", "p_value"),
    ("paraphrase delta, points [95% CI]", _in_points, "delta_points", "paraphrase"),
    ("p", md.pvalue, "test", "paraphrase", "p_value"),
)


def term_deltas(label: str, entry: dict, *, where: str = "summary"):
    """Per-term change from zero-shot (points) for few-shot and paraphrase, plus the mean."""
    per_term = need(entry, "per_term", where=where)
    deltas = need(entry, "delta_points", where=where)
    if not per_term:
        raise MissingData(f"{where} has no per-term results")
    # per-term deltas are stored in points already: 100 x (condition - zero_shot)
    terms = sorted(per_term, key=lambda t: _order(per_term[t], t))
    fig, ax = style.new_figure(SIZES["fewshot"])
    n_rows = len(terms) + 1
    ys = np.arange(n_rows)[::-1]
    ax.axvline(0, color=style.OKABE_ITO["black"], linewidth=0.8)
    ax.axhline(ys[0] - 0.5, color="#999999", linewidth=0.6)
    for i, condition in enumerate(CONDITIONS):
        s, name = style.SERIES[i], condition.replace("_", "-")
        offset = 0.15 if i == 0 else -0.15
        style.interval(
            ax, ys[0] + offset, deltas.get(condition), **s, filled=i == 0, markersize=8,
            lw=1.8, label=f"{name}: mean, 95% CI (top row)",
        )  # fmt: skip
        values = [_points(per_term[t], condition) for t in terms]
        face = s["color"] if i == 0 else "white"
        ax.plot(
            values,
            ys[1:] + offset,
            marker=s["marker"],
            markersize=4,
            color=s["color"],
            markerfacecolor=face,
            linestyle="none",
            label=f"{name}: per term",
        )
    ax.set_yticks(ys, ["all terms (mean)", *terms], fontsize=6 if len(terms) > 25 else 8)
    ax.set_ylim(-0.7, n_rows - 0.3)
    ax.set_xlabel("change from zero-shot (percentage points of rubric score)")
    ax.set_title(f"{style.short_label(label)}: few-shot and paraphrase vs zero-shot")
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.5)
    ax.set_axisbelow(True)
    style.figure_legend(fig, [ax], ncols=2)
    caption = (
        f"{label}: change in generation score from zero-shot, in percentage points; the top "
        "row is the mean paired delta over prompts with its 95% bootstrap CI, the rows below "
        "single terms (sorted by the few-shot delta)."
    )
    return fig, caption


def _order(row: dict, term: str) -> tuple:
    value = _points(row, "few_shot")
    return (bool(np.isnan(value)), 0.0 if np.isnan(value) else -value, term)


def _points(row: dict, condition: str) -> float:
    value = row.get(f"delta_{condition}")
    return np.nan if value is None else float(value)


def _tables(exp: ExperimentResults) -> list[str]:
    return md.model_table(exp.models, COLUMNS)


plots = style.model_plots(("fewshot", term_deltas))
SECTION = Section("fewshot", TITLE, md.prose("fewshot"), SIZES, plots, _tables, order=5)
