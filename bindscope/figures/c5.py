"""C5 causal head ablation: condition scores, random-set null distributions, and all models."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.section import Section
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "C5: causal head ablation"
#: Inches per figure kind; at DPI 150 each gives whole pixels.
SIZES = {"c5": (12.0, 4.4), "c5_cross_architecture": (12.0, 5.0)}
TASKS = ("recognition", "generation")
UNITS = {
    "recognition": "accuracy (fraction correct)",
    "generation": "rubric score (0–1)",
}
DROP_LABEL = {
    "recognition": "accuracy drop, baseline − ablated (fraction of prompts)",
    "generation": "rubric-score drop, baseline − ablated (0–1 scale)",
}
BAR_CONDITIONS = ("baseline", "top", "bottom", "random")


def plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    """The C5 ablation figures: (file stem, builder) pairs, drawn only when asked."""
    where = str(exp.folder / "summary.json")
    k = (exp.summary or {}).get("k")
    yield from style.per_model(exp.models, exp.folder, "c5", model_figure, k=k)
    yield "c5_cross_architecture", lambda: cross_architecture(exp.models, k=k, where=where)


def _condition_bar(entry: dict, condition: str, task: str):
    """(score, (lower, upper) error) of one bar; the errors are None without an interval."""
    conditions = entry.get("conditions") or {}
    base = (conditions.get("baseline") or {}).get(task)
    if condition == "baseline" or base is None:
        return base, None
    if condition == "random":
        drop, err = _drop_bar(entry, "random", task)
        # a score is baseline - drop, so the drop's upper error is the score's lower one
        return (None, None) if drop is None else (base - drop, err[::-1])
    value = (conditions.get(condition) or {}).get(task)
    drop = ((entry.get("drops") or {}).get(condition) or {}).get(task)
    if value is None or not drop or drop.get("low") is None:
        return value, None
    # the CI of the paired drop, placed on the score scale
    low, high = base - drop["high"], base - drop["low"]
    return value, (max(0.0, value - low), max(0.0, high - value))


def model_figure(label: str, entry: dict, *, k: int | None = None, where: str = "summary"):
    """Condition scores with CIs (left) and each task's random-set drop histogram (right).

    Only the tasks the model was scored on get bars and a panel.
    """
    baseline = need(entry, "conditions", "baseline", where=where)
    tasks = [t for t in TASKS if baseline.get(t) is not None and baseline.get(f"n_{t}")]
    if not tasks:
        raise MissingData(f"{where}: {label} has no task with a baseline score")
    fig, axes = style.new_figure(
        SIZES["c5"], ncols=1 + len(tasks), width_ratios=[1.3] + [1] * len(tasks)
    )
    ax = axes[0]
    width = 0.2
    ends = [0.0, 1.0]  # the y range must hold every bar and whisker
    for i, condition in enumerate(BAR_CONDITIONS):
        for t, task in enumerate(tasks):
            value, err = _condition_bar(entry, condition, task)
            if value is not None:
                x = t + (i - 1.5) * width
                _bar(ax, x, value, err, width=width, condition=condition, k=k, lw=1)
                low, high = err if err is not None else (0.0, 0.0)
                ends += [value - low, value + high]
    for t, task in enumerate(tasks):
        level = (entry.get("chance") or {}).get(task)
        if level is not None:  # across the task's bars
            ax.hlines(level, t - 2.5 * width, t + 2.5 * width, colors="black",
                      linestyles=":", label="chance (1/choices)")  # fmt: skip
    ax.set_xticks(range(len(tasks)), [f"{task}\n(n = {baseline[f'n_{task}']})" for task in tasks])
    ax.set_ylim(min(ends) - 0.05, max(ends) + 0.05)
    ax.set_ylabel("score (recognition: accuracy; generation: rubric, 0–1)")
    ax.set_title(f"{style.short_label(label)}: score by condition")
    for panel, task in zip(axes[1:], tasks):
        _random_histogram(panel, entry, task, k)
    style.figure_legend(fig, axes, ncols=6)
    caption = (
        f"{label}: C5 ablation. Left, mean score per condition (dotted: recognition's chance "
        "level, 1/choices averaged over the items); bars for top and bottom "
        "show the 95% CI of the paired drop from baseline, the random bar the 2.5-97.5% "
        "range over random sets. Right, drops of the random head sets (histogram) with the "
        "top and bottom sets marked, and the one-sided rank p of the top set (raw and "
        "Holm-adjusted across models)."
    )
    return fig, caption


def _bar(
    ax: Any,
    x: float,
    value: float,
    err: tuple[float, float] | None,
    *,
    width: float,
    condition: str,
    k: int | None,
    **errorbar: Any,
) -> None:
    """One condition's bar in its style, with its interval when it has one."""
    s = style.CONDITION_STYLE[condition]
    ax.bar(x, value, width, color=s["color"], hatch=s["hatch"], edgecolor="black",
           linewidth=0.6, label=_condition_name(condition, k))  # fmt: skip
    if err is not None:
        ax.errorbar(x, value, yerr=[[err[0]], [err[1]]], color="black", capsize=3, **errorbar)


def _condition_name(condition: str, k: int | None) -> str:
    kk = k if k is not None else "k"
    return {
        "baseline": "baseline (no ablation)",
        "top": f"top-{kk} heads (highest BSI)",
        "bottom": f"bottom-{kk} heads (lowest BSI)",
        "random": f"random {kk}-head sets (mean)",
    }[condition]


def _random_histogram(ax: Any, entry: dict, task: str, k: int | None) -> None:
    drops = (entry.get("random_drops") or {}).get(task)
    ax.set_xlabel(DROP_LABEL[task])
    ax.set_ylabel("random head sets (count)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if not drops:
        ax.set_title(f"{task}: no random-set drops stored")
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        return
    s = style.CONDITION_STYLE["random"]
    bins = int(min(20, max(5, len(drops) // 3)))
    ax.hist(drops, bins=bins, color=s["color"], hatch=s["hatch"], edgecolor="black", linewidth=0.5)
    for condition, linestyle in (("top", "-"), ("bottom", "--")):
        drop = ((entry.get("drops") or {}).get(condition) or {}).get(task)
        if drop and drop.get("value") is not None:
            ax.axvline(
                drop["value"],
                color=style.CONDITION_STYLE[condition]["color"],
                linestyle=linestyle,
                linewidth=2,
                label=f"{condition}-{k if k is not None else 'k'} set's drop",
            )
            ax.annotate(
                f"{drop['value']:.3f}",
                (drop["value"], 1.0),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    p = (entry.get("p_value") or {}).get(task)
    holm = (entry.get("p_holm") or {}).get(task)
    ax.set_title(
        f"{task}: {len(drops)} random sets\none-sided p = {md.pvalue(p)}, "
        f"Holm p = {md.pvalue(holm)}",
        pad=12,
    )


def cross_architecture(models: dict[str, dict], *, k: int | None = None, where: str = "summary"):
    """Top, bottom and random-mean drops with CIs for every model, one panel per task."""
    if not models:
        raise MissingData(f"{where} lists no models")
    labels = list(models)
    # a task no model evaluated (the demo leaves generation out) gets no empty panel
    tasks = [t for t in TASKS if any(_drop_bar(models[m], "top", t)[0] is not None for m in labels)]
    if not tasks:
        raise MissingData(f"{where}: no model has a top-set drop for any task")
    fig, axes = style.new_figure(SIZES["c5_cross_architecture"], ncols=len(tasks), sharey=True)
    axes = np.atleast_1d(axes)
    width = 0.26
    for ax, task in zip(axes, tasks):
        ax.axhline(0, color="black", linewidth=0.8)
        for m, label in enumerate(labels):
            entry = models[label]
            for i, condition in enumerate(("top", "bottom", "random")):
                value, err = _drop_bar(entry, condition, task)
                if value is not None:
                    x = m + (i - 1) * width
                    _bar(ax, x, value, err, width=width, condition=condition, k=k)
        holm = [(models[label].get("p_holm") or {}).get(task) for label in labels]
        ticks = [
            f"{style.short_label(label)}\nHolm p = {md.pvalue(p)}" for label, p in zip(labels, holm)
        ]
        ax.set_xticks(range(len(labels)), ticks)
        if len(labels) > 3:
            ax.tick_params(axis="x", labelrotation=25)
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_title(f"{task}: drop in {UNITS[task]}")
        ax.set_xlabel("model (Holm p: top set vs random sets, one-sided)")
    axes[0].set_ylabel("drop from baseline (baseline − ablated, score units)")
    style.figure_legend(fig, axes, ncols=3)
    caption = (
        "C5 across architectures: paired drop from baseline when the top-k, bottom-k or random "
        "k-head sets are ablated (top and bottom: 95% bootstrap CI; random: 2.5-97.5% range "
        "over sets), with the Holm-adjusted rank p of the top set."
    )
    return fig, caption


def _drop_bar(entry: dict, condition: str, task: str):
    if condition == "random":
        drops = (entry.get("random_drops") or {}).get(task)
        if not drops:
            return None, None
        arr = np.asarray(drops, dtype=float)  # one mean drop per random set
        low, high = np.percentile(arr, [2.5, 97.5])
        value = float(arr.mean())
        return value, (value - low, high - value)
    drop = ((entry.get("drops") or {}).get(condition) or {}).get(task)
    if not drop or drop.get("value") is None:
        return None, None
    value = drop["value"]
    if drop.get("low") is None or drop.get("high") is None:
        return value, None
    return value, (max(0.0, value - drop["low"]), max(0.0, drop["high"] - value))


def _settings(s: dict) -> str:
    """The run's design in one paragraph: sets, sampling, nulls, and the files with hashes."""
    if s.get("sampling") == "sequential":
        sets = (
            f"random sets drawn sequentially per null (Besag-Clifford: stop once "
            f"{s.get('stop_at')} sets drop at least as much as the top set, at most "
            f"{s.get('n_random')}, so p can reach 1/{(s.get('n_random') or 0) + 1})"
        )
    else:
        sets = f"{s.get('n_random')} random sets per null (fixed count)"
    files = (
        f"heads ranked on `{s.get('ranking_set')}` (sha256 `{str(s.get('ranking_sha256'))[:12]}`), "
        f"evaluated on `{s.get('prompt_set')}` (sha256 `{str(s.get('prompt_sha256'))[:12]}`)"
    )
    return (
        f"k = {s.get('k')} heads per set, {s.get('ablation')} ablation, {sets}, seed "
        f"{s.get('seed')}; nulls: {', '.join(s.get('nulls') or ['random'])}; {files}."
        + (f" Design: {s['design']}" if s.get("design") else "")
    )


def tables(exp: ExperimentResults) -> list[str]:
    """The report's C5 ablation tables, as Markdown lines."""
    s = exp.summary or {}
    settings = _settings(s)
    header = [
        "model",
        "task",
        "n",
        "chance",
        "baseline",
        "top",
        "bottom",
        "random mean",
        "top drop [95% CI]",
        "bottom drop [95% CI]",
        "specificity [95% CI]",
        "p",
        "Holm p",
    ]
    heads = [
        [
            label,
            _share(s.get("k"), (exp.provenance.get(label) or {}).get("heads")),
            md.heads(e.get("top_heads")),
            md.heads(e.get("bottom_heads")),
        ]
        for label, e in exp.models.items()
    ]
    nulls = ["model", "score", "null", "p (floor)", "tail p [95% CI]", "Holm p (on)",
             "sets drawn (support)", "stopped", "specificity [95% CI]",
             "detectable drop"]  # fmt: skip
    out = [
        settings,
        "",
        *md.table(header, md.model_rows(exp.models, _task_rows), left=2),
        *md.table(["model", "heads per set", "top heads", "bottom heads"], heads, left=4),
        "",
        *md.table(nulls, md.model_rows(exp.models, _null_rows), left=3),
    ]
    matched = md.model_rows(exp.models, _match_rows)
    if matched:
        header = ["model", "top head", "class", "match distance", "typical distance",
                  "heads of its class outside the top set"]  # fmt: skip
        out += ["", *md.table(header, matched, left=3)]
    return out


def _null_rows(label: str, entry: dict) -> Iterator[list[str]]:
    """One row per score and null: its p, Holm p, sets drawn and why it stopped."""
    for null, by_score in (entry.get("nulls") or {}).items():
        for score, t in by_score.items():
            yield [
                label,
                score,
                null,
                f"{md.pvalue(t.get('p'))} ({md.pvalue(t.get('p_floor'))})",
                _tail(t.get("tail") or {}),
                f"{md.pvalue(t.get('p_holm'))} ({t.get('holm_on', 'exact')})",
                f"{md.num(t.get('n_drawn'))} ({md.num(t.get('support'))})",
                str(t.get("stopped")),
                md.estimate(t.get("specificity")),
                md.num((entry.get("detectable_drop") or {}).get(score)) if null == "random" else "",
            ]


def _tail(tail: dict) -> str:
    """The GPD tail p with its bootstrap interval and tail size, or why there is none."""
    if tail.get("p") is None:
        said = {"no-fit": "no fit passed", "too-few-sets": "too few sets"}
        said["enumerated"] = "every set used"
        return said.get(tail.get("method", ""), "not needed" if tail else md.DASH)
    interval = f"{md.pvalue(tail.get('low'))}, {md.pvalue(tail.get('high'))}"
    return f"{md.pvalue(tail['p'])} [{interval}] (tail {tail['n_tail']} of {tail['n_null']})"


def _match_rows(label: str, entry: dict) -> Iterator[list[str]]:
    """How close the class-matched null's candidates are to each top head."""
    match = entry.get("class_match") or {}
    for head in match.get("heads", []):
        counts = (match.get("classes") or {}).get(head.get("class"), {})
        yield [
            label,
            md.heads([head["head"]]),
            str(head.get("class")),
            md.num(head.get("distance")),
            md.num(head.get("typical")),
            f"{counts.get('outside', '?')} (top set holds {counts.get('in_top', '?')})",
        ]


def _task_rows(label: str, entry: dict) -> Iterator[list[str]]:
    """One row per task the model was scored on: scores, drops, specificity and p."""
    conditions = entry.get("conditions") or {}
    drops = entry.get("drops") or {}
    for task in (*TASKS[:1], "margin", *TASKS[1:]):
        base = (conditions.get("baseline") or {}).get(task)
        if base is None:
            continue
        rand = (drops.get("random_mean") or {}).get(task)
        yield [
            label,
            task,
            md.num((conditions.get("baseline") or {}).get(f"n_{task}")),
            md.num((entry.get("chance") or {}).get(task)),
            md.num(base),
            md.num((conditions.get("top") or {}).get(task)),
            md.num((conditions.get("bottom") or {}).get(task)),
            md.num(None if rand is None else base - rand),
            md.estimate((drops.get("top") or {}).get(task)),
            md.estimate((drops.get("bottom") or {}).get(task)),
            md.estimate((entry.get("specificity") or {}).get(task)),
            md.pvalue((entry.get("p_value") or {}).get(task)),
            md.pvalue((entry.get("p_holm") or {}).get(task)),
        ]


def _share(k: int | None, heads: list[int] | None) -> str:
    """``k of N heads (x%)``: how much of a model one ablated set removes."""
    if k is None or not heads:
        return md.num(k)
    total = heads[0] * heads[1]
    return f"{k} of {total} ({100 * k / total:.1f}%)"


SECTION = Section("c5", TITLE, md.prose("c5"), SIZES, plots, tables, order=3)
