"""Head taxonomy: a [layer, head] map per score, class tables, each class's emergence."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "Head taxonomy: sink, previous-token, induction, duplicate-token and binding heads"
SIZES = {"heads_map": (10.0, 6.0), "heads_emergence": (12.0, 7.0)}
CLASSES = ("sink", "previous_token", "induction", "duplicate_token", "binding")  # table order
MAP_SCORES = (*CLASSES, "spread")
NAMES = {score: score.replace("_", "-") for score in MAP_SCORES}
NAMES |= {"binding": "binding (BSI)", "spread": "spread / mean keys"}


def _plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    yield from style.per_model(exp.models, exp.where, "heads_map", score_maps)
    checkpoints = (exp.summary or {}).get("emergence") or {}
    yield from style.per_model(checkpoints, exp.where, "heads_emergence", emergence)


def score_maps(label: str, entry: dict, *, where: str = "summary"):
    """One ``[layer, head]`` map per score, all on the 0-1 colour scale."""
    scores = need(entry, "scores", where=where)
    if not scores:
        raise MissingData(f"{where} has no scores")
    fig, axes = style.new_figure(SIZES["heads_map"], nrows=2, ncols=3, sharex=True, sharey=True)
    image = None
    for ax, score in zip(axes.flat, MAP_SCORES):
        found = scores.get(score) or {}  # spread is a fraction of keys, not a score
        values = entry.get("spread_fraction") if score == "spread" else found.get("value")
        ax.set_title(NAMES[score])
        if values is None:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            continue
        arr = np.array([[np.nan if x is None else x for x in row] for row in values], dtype=float)
        image = style.heatmap(ax, arr, vmin=0.0, vmax=1.0)
        style.integer_ticks(ax)
    for ax in axes[-1]:
        ax.set_xlabel("head")
    for ax in axes[:, 0]:
        ax.set_ylabel("layer")
    if image is not None:
        fig.colorbar(image, ax=axes, label="mean score (0–1; spread as a fraction of keys)")
    counts = (entry.get("classes") or {}).get("counts") or {}
    fig.suptitle(f"{style.short_label(label)}: head scores")
    caption = (
        f"{label}: mean score of every head over {entry.get('n_prompts')} prompts "
        f"({entry.get('n_repeated')} repeated random sequences for induction and duplicate-"
        f"token); shared 0-1 scale. Heads per class: "
        + ", ".join(f"{c} {n}" for c, n in counts.items())
        + "."
    )
    return fig, caption


def emergence(model: str, entry: dict, *, where: str = "summary"):
    """Fraction of heads per class per checkpoint, and the top heads' score trajectories."""
    revisions = need(entry, "revisions", where=where)
    fraction = need(entry, "fraction", where=where)
    fig, axes = style.new_figure(SIZES["heads_emergence"], nrows=2, ncols=3)
    x = np.arange(len(revisions))
    ax = axes.flat[0]
    for i, (cls, values) in enumerate(fraction.items()):
        series = style.SERIES[i % len(style.SERIES)]
        ax.plot(x, values, label=cls, **series)
    ax.set_title("fraction of heads in each class")
    ax.set_ylim(-0.02, 1.02)
    trajectories = entry.get("trajectories") or {}
    thresholds = entry.get("thresholds") or {}
    for ax, score in zip(
        axes.flat[1:], ("induction", "previous_token", "sink", "duplicate_token", "binding")
    ):
        found = trajectories.get(score)
        ax.set_title(f"top {NAMES[score]} heads")
        if not found:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            continue
        for j, ((layer, head), values) in enumerate(zip(found["heads"], found["values"])):
            ys = [np.nan if v is None else v for v in values]
            ax.plot(x, ys, color=style.SERIES[j % len(style.SERIES)]["color"], marker=".", lw=1,
                    label=f"L{layer}.H{head}")  # fmt: skip
        if score in thresholds:
            ax.axhline(thresholds[score], color="grey", lw=0.8, ls=":")
        ax.legend(fontsize=6, frameon=False)
        ax.set_ylim(-0.02, 1.02)
    tokens = entry.get("tokens") or [None] * len(revisions)
    ticks = [
        r if t is None else f"{r}\n{t / 1e9:.3g}B tok" for r, t in zip(revisions, tokens)
    ]  # fmt: skip
    for ax in axes.flat:
        ax.set_xticks(x, ticks, rotation=45, ha="right", fontsize=6)
    # in its own panel: above them all it named the other panels' head colours too
    axes.flat[0].legend(fontsize=6, frameon=False, title="class", title_fontsize=7)
    lead = entry.get("induction_lead_tokens")
    caption = (
        f"{model}: fraction of heads in each class (left) and the score trajectories of the "
        "top heads at the last checkpoint (dotted: the class threshold), per checkpoint in "
        "training order. "
        + ", ".join(
            f"{c} first crosses at {(f or {}).get('revision') or 'no checkpoint'}"
            for c, f in (entry.get("first") or {}).items()
        )
        + (f"; induction leads sink formation by {lead:,} tokens." if lead is not None else ".")
    )
    return fig, caption


def _tables(exp: ExperimentResults) -> list[str]:
    lines = md.model_table(exp.models, COLUMNS)
    thresholds = next(iter(exp.models.values()), {}).get("classes", {}).get("thresholds")
    if thresholds:
        lines += ["Thresholds: " + ", ".join(f"{c} ≥ {v}" for c, v in thresholds.items()) + ".", ""]
    for model, entry in ((exp.summary or {}).get("emergence") or {}).items():
        first = entry.get("first") or {}
        rows = [
            [c, (f or {}).get("revision") or md.DASH, md.num((f or {}).get("tokens"))]
            for c, f in first.items()
        ]
        lines += [f"**{model}**: first checkpoint where each class crosses its threshold", ""]
        lines += md.table(["class", "first checkpoint", "tokens"], rows, left=2)
        lead = entry.get("induction_lead_tokens")
        lines += [f"Induction lead over sink formation: {md.num(lead)} tokens.", ""]
    return lines


def _overlap(entry: dict) -> str:
    overlap = entry.get("binding_top_overlap") or {}
    return f"{overlap.get('sink', 0)} sink, {overlap.get('previous_token', 0)} previous"


COLUMNS = (
    ("layers", md.num, "n_layers"),
    ("heads", md.num, "n_heads"),
    ("position 0 is BOS", str, "position_0_is_bos"),
    *((c.replace("_", "-"), md.num, "classes", "counts", c) for c in CLASSES),
    ("binding top-k", md.heads, "binding_top"),
    ("of which", _overlap),
)


SECTION = Section("heads", TITLE, md.prose("heads"), SIZES, _plots, _tables, order=6)
