"""C5 causal head ablation: condition scores, random-set null distributions, and all models."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "C5: causal head ablation"
SIZES = {"c5": (12.0, 7.6), "c5_cross_architecture": (12.0, 5.0)}
#: The scores in the report's order: accuracy, its continuous margin, the rubric.
SCORES = ("recognition", "margin", "generation")
UNITS = {
    "recognition": "accuracy (fraction correct)",
    "margin": "choice margin (nats per token)",
    "generation": "rubric score (0–1)",
}
DROP_LABEL = {
    "recognition": "accuracy drop, baseline − ablated (fraction of items)",
    "margin": "margin drop, baseline − ablated (nats per token)",
    "generation": "rubric-score drop, baseline − ablated (0–1 scale)",
}
BAR_CONDITIONS = ("baseline", "top", "bottom", "random")
CONDITION_NAMES = {
    "baseline": "baseline (no ablation)",
    "top": "top-{k} heads (highest BSI)",
    "bottom": "bottom-{k} heads (lowest BSI)",
    "random": "random {k}-head sets (mean)",
}
#: The table's columns of numbers and of estimates per score, as keys into a model's entry.
TABLE_NUMBERS = [("chance",), *(("conditions", c) for c in ("baseline", "top", "bottom"))]
TABLE_ESTIMATES = [("drops", "top"), ("drops", "bottom"), ("specificity",)]
#: Most histogram bins; a score on steps gets whole steps per bin beyond this.
MAX_BINS = 60
#: The finest step of one item's score that histogram bins look for (1/60 of the scale).
MAX_STEP = 60


def _plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    k = (exp.summary or {}).get("k")
    yield from style.per_model(exp.models, exp.where, "c5", model_figure, k=k)
    if len(exp.models) > 1:
        yield "c5_cross_architecture", lambda: cross_architecture(exp.models, k=k, where=exp.where)


def _condition_bar(entry: dict, condition: str, score: str) -> tuple[Any, Any]:
    # (score, (lower, upper) error); the errors are None without an interval
    base = md.dig(entry, "conditions", "baseline", score)
    if condition == "baseline" or base is None:
        return base, None
    if condition == "random":
        drop, err = _drop_bar(entry, "random", score)
        # a score is baseline - drop, so the drop's upper error is the score's lower one
        return (None, None) if drop is None else (base - drop, err[::-1])
    value = md.dig(entry, "conditions", condition, score)
    drop = md.dig(entry, "drops", condition, score)
    if value is None or not drop or drop.get("low") is None:
        return value, None
    # the CI of the paired drop, placed on the score scale
    low, high = base - drop["high"], base - drop["low"]
    return value, (max(0.0, value - low), max(0.0, high - value))


def model_figure(
    label: str, entry: dict, *, k: int | None = None, where: str = "summary"
) -> tuple[Figure, str]:
    """One column per measured score: its mean per condition (top) and random-set drops (bottom)."""
    baseline = need(entry, "conditions", "baseline", where=where)
    scores = [s for s in SCORES if baseline.get(s) is not None and baseline.get(f"n_{s}")]
    if not scores:
        raise MissingData(f"{where}: {label} has no score with a baseline")
    fig, axes = style.new_figure(SIZES["c5"], nrows=2, ncols=len(scores), squeeze=False)
    for (bars, histogram), score in zip(axes.T, scores):
        _score_bars(bars, entry, score, k)
        bars.set_title(f"{style.short_label(label)}: {bars.get_title()}")
        _random_histogram(histogram, entry, score, k)
    style.figure_legend(fig, axes.flat, ncols=4)
    caption = (
        f"{label}: C5 ablation, one column per score. Top, mean score per condition: "
        "accuracy with its chance level (dotted, 1/choices averaged over the items), the "
        "choice margin (the continuous reading the report recommends; a grey line at 0, where "
        "the answer ties the best other choice), the rubric score. Bars for top and bottom "
        "show the 95% CI of the paired drop from baseline, the random bar the 2.5-97.5% range "
        "over random sets. Bottom, the drops of the random head sets, one bin per step the "
        "score can take (1/items for accuracy), with the top and bottom sets marked, and the "
        "one-sided rank p of the top set (raw and Holm-adjusted across models)."
    )
    return fig, caption


def _score_bars(ax: Any, entry: dict, score: str, k: int | None) -> None:
    ends = [0.0] if score == "margin" else [0.0, 1.0]  # the range holds every whisker
    for x, condition in enumerate(BAR_CONDITIONS):
        value, err = _condition_bar(entry, condition, score)
        if value is not None:
            _bar(ax, x, value, err, width=0.7, condition=condition, k=k, lw=1)
            low, high = err if err is not None else (0.0, 0.0)
            ends += [value - low, value + high]
    level = md.dig(entry, "chance", score)
    if level is not None:
        ax.axhline(level, color="black", linestyle=":", label="chance (1/choices)")
    if score == "margin":
        ax.axhline(0, color="grey", linewidth=1.2,
                   label="margin 0: answer ties the best other choice")  # fmt: skip
    pad = 0.05 * (max(ends) - min(ends))
    ax.set_ylim(min(ends) - pad, max(ends) + pad)
    names = ["baseline", f"top-{k or 'k'}", f"bottom-{k or 'k'}", "random"]
    ax.set_xticks(range(len(names)), names)
    n = md.dig(entry, "conditions", "baseline", f"n_{score}")
    read = " (continuous: read this)" if score == "margin" else ""
    ax.set_title(f"{score}{read}\nscore by condition, n = {n} items")
    ax.set_ylabel(UNITS[score])


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
    s = style.CONDITION_STYLE[condition]
    ax.bar(x, value, width, color=s["color"], hatch=s["hatch"], edgecolor="black",
           linewidth=0.6, label=CONDITION_NAMES[condition].format(k=_k(k)))  # fmt: skip
    if err is not None:
        ax.errorbar(x, value, yerr=[[err[0]], [err[1]]], color="black", capsize=3, **errorbar)


def _k(k: int | None) -> int | str:
    return k if k is not None else "k"


def drop_bins(drops: list[float], n_items: int | None) -> Any:
    """Histogram bins on a score's steps, centred on the values (numpy's for a continuous score).

    A mean over n items of a score in steps of 1/m (accuracy: m = 1; the rubric: m = 15) moves
    in steps of 1/(n m); other bin widths would split or merge them and hide ties with the top set.
    """
    if not n_items:
        return "auto"
    values = np.asarray(drops, float) * n_items
    on_step = (
        m
        for m in range(1, MAX_STEP + 1)
        if np.allclose(values * m, np.round(values * m), rtol=0, atol=1e-6)
    )
    m = next(on_step, None)
    if m is None:
        return "auto"
    low, high = int(np.round(values.min() * m)), int(np.round(values.max() * m))
    per_bin = -(-(high - low + 1) // MAX_BINS)  # whole steps per bin, so none is split
    return (np.arange(low, high + per_bin + 1, per_bin) - 0.5) / (n_items * m)


def _random_histogram(ax: Any, entry: dict, score: str, k: int | None) -> None:
    drops = md.dig(entry, "random_drops", score)
    ax.set_xlabel(DROP_LABEL[score])
    ax.set_ylabel("random head sets (count)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if not drops:
        ax.set_title(f"{score}: no random-set drops stored")
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        return
    s = style.CONDITION_STYLE["random"]
    bins = drop_bins(drops, md.dig(entry, "n_items", score))
    ax.hist(drops, bins=bins, color=s["color"], hatch=s["hatch"], edgecolor="black", linewidth=0.5)
    for condition, linestyle in (("top", "-"), ("bottom", "--")):
        drop = md.dig(entry, "drops", condition, score)
        if drop and drop.get("value") is not None:
            ax.axvline(drop["value"], color=style.CONDITION_STYLE[condition]["color"],
                       linestyle=linestyle, linewidth=2,
                       label=f"{condition}-{_k(k)} set's drop")  # fmt: skip
            ax.annotate(f"{drop['value']:.3f}", (drop["value"], 1.0),
                        xycoords=("data", "axes fraction"), ha="center", va="bottom",
                        fontsize=7)  # fmt: skip
    p, holm = md.dig(entry, "p_value", score), md.dig(entry, "p_holm", score)
    ax.set_title(
        f"{score}: {len(drops)} random sets\none-sided p = {md.pvalue(p)}, "
        f"Holm p = {md.pvalue(holm)}",
        pad=12,
    )


def cross_architecture(
    models: dict[str, dict], *, k: int | None = None, where: str = "summary"
) -> tuple[Figure, str]:
    """Top, bottom and random-mean drops with CIs for every model, one panel per score."""
    if not models:
        raise MissingData(f"{where} lists no models")
    labels = list(models)
    # a score no model measured (the demo leaves generation out) gets no empty panel
    scores = [
        s for s in SCORES if any(_drop_bar(models[m], "top", s)[0] is not None for m in labels)
    ]
    if not scores:
        raise MissingData(f"{where}: no model has a top-set drop for any score")
    fig, axes = style.new_figure(SIZES["c5_cross_architecture"], ncols=len(scores))
    axes = np.atleast_1d(axes)
    for ax, score in zip(axes, scores):
        _drops_by_model(ax, models, score, k)
    style.figure_legend(fig, axes, ncols=3)
    caption = (
        "C5 across architectures: paired drop from baseline when the top-k, bottom-k or random "
        "k-head sets are ablated (top and bottom: 95% bootstrap CI; random: 2.5-97.5% range "
        "over sets), with the Holm-adjusted rank p of the top set; each score on its own scale."
    )
    return fig, caption


def _drops_by_model(ax: Any, models: dict[str, dict], score: str, k: int | None) -> None:
    labels, width = list(models), 0.26
    ax.axhline(0, color="black", linewidth=0.8)
    for m, label in enumerate(labels):
        for i, condition in enumerate(("top", "bottom", "random")):
            value, err = _drop_bar(models[label], condition, score)
            if value is not None:
                _bar(ax, m + (i - 1) * width, value, err, width=width, condition=condition, k=k)
    holm = [md.dig(models[label], "p_holm", score) for label in labels]
    ticks = [
        f"{style.short_label(label)}\nHolm p = {md.pvalue(p)}" for label, p in zip(labels, holm)
    ]
    ax.set_xticks(range(len(labels)), ticks)
    if len(labels) > 3:
        ax.tick_params(axis="x", labelrotation=25)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_title(f"{score}: drop in {UNITS[score]}")
    ax.set_xlabel("model (Holm p: top set vs random sets, one-sided)")
    ax.set_ylabel(f"drop from baseline ({UNITS[score].split(' (')[0]})")


def _drop_bar(entry: dict, condition: str, task: str) -> tuple[Any, Any]:
    if condition == "random":
        drops = md.dig(entry, "random_drops", task)
        if not drops:
            return None, None
        arr = np.asarray(drops, dtype=float)  # one mean drop per random set
        low, high = np.percentile(arr, [2.5, 97.5])
        value = float(arr.mean())
        return value, (value - low, high - value)
    drop = md.dig(entry, "drops", condition, task)
    if not drop or drop.get("value") is None:
        return None, None
    value = drop["value"]
    if drop.get("low") is None or drop.get("high") is None:
        return value, None
    return value, (max(0.0, value - drop["low"]), max(0.0, drop["high"] - value))


def _settings(s: dict) -> str:
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


def _tables(exp: ExperimentResults) -> list[str]:
    s = exp.summary or {}
    header = ["model", "task", "n", "chance", "baseline", "top", "bottom", "random mean"]
    header += ["top drop [95% CI]", "bottom drop [95% CI]", "specificity [95% CI]", "p", "Holm p"]
    heads = [
        [
            label,
            _share(s.get("k"), md.dig(exp.provenance, label, "heads")),
            md.heads(e.get("top_heads")),
            md.heads(e.get("bottom_heads")),
        ]
        for label, e in exp.models.items()
    ]
    nulls = ["model", "score", "null", "p (floor)", "tail p [95% CI]", "Holm p (on)",
             "sets drawn (support)", "stopped", "specificity [95% CI]",
             "detectable drop"]  # fmt: skip
    out = [
        _settings(s),
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
                md.num(md.dig(entry, "detectable_drop", score)) if null == "random" else "",
            ]


def _tail(tail: dict) -> str:
    if tail.get("p") is None:
        said = {"no-fit": "no fit passed", "too-few-sets": "too few sets"}
        said["enumerated"] = "every set used"
        return said.get(tail.get("method", ""), "not needed" if tail else md.DASH)
    interval = f"{md.pvalue(tail.get('low'))}, {md.pvalue(tail.get('high'))}"
    return f"{md.pvalue(tail['p'])} [{interval}] (tail {tail['n_tail']} of {tail['n_null']})"


def _match_rows(label: str, entry: dict) -> Iterator[list[str]]:
    match = entry.get("class_match") or {}
    for head in match.get("heads", []):
        counts = md.dig(match, "classes", head.get("class")) or {}
        yield [
            label,
            md.heads([head["head"]]),
            str(head.get("class")),
            md.num(head.get("distance")),
            md.num(head.get("typical")),
            f"{counts.get('outside', '?')} (top set holds {counts.get('in_top', '?')})",
        ]


def _task_rows(label: str, entry: dict) -> Iterator[list[str]]:
    for task in SCORES:
        base = md.dig(entry, "conditions", "baseline", task)
        if base is None:
            continue
        rand = md.dig(entry, "drops", "random_mean", task)
        cells = [md.num(md.dig(entry, "conditions", "baseline", f"n_{task}"))]
        cells += [md.num(md.dig(entry, *keys, task)) for keys in TABLE_NUMBERS]
        cells.append(md.num(None if rand is None else base - rand))
        cells += [md.estimate(md.dig(entry, *keys, task)) for keys in TABLE_ESTIMATES]
        cells += [md.pvalue(md.dig(entry, key, task)) for key in ("p_value", "p_holm")]
        yield [label, task, *cells]


def _share(k: int | None, heads: list[int] | None) -> str:
    if k is None or not heads:
        return md.num(k)
    total = heads[0] * heads[1]
    return f"{k} of {total} ({100 * k / total:.1f}%)"


SECTION = Section("c5", TITLE, md.prose("c5"), SIZES, _plots, _tables, order=3)
