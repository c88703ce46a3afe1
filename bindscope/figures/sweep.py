"""Checkpoint sweep: emergence curves of EB* and behaviour, and the lead-lag forest plot."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults, MissingData, need

TITLE = "Checkpoint sweep: emergence and lead-lag"
SIZES = {"sweep_emergence": (8.0, 6.0), "sweep_leadlag": (8.0, 4.4)}
METHODS = ("pearson", "spearman")


def _plots(exp: ExperimentResults) -> Iterator[tuple[str, object]]:
    yield from style.per_model(exp.models, exp.where, "sweep_emergence", emergence)
    yield "sweep_leadlag", lambda: leadlag_forest(exp.models, where=exp.where)


def emergence(model: str, entry: dict, *, where: str = "summary"):
    """EB* (top) and behaviour (bottom) per checkpoint, mean over terms with a 95% CI band."""
    revisions = need(entry, "revisions", where=where)
    if not revisions:
        raise MissingData(f"{where} has no revisions")
    x = np.arange(len(revisions))
    fig, (ax_eb, ax_beh) = style.new_figure(SIZES["sweep_emergence"], nrows=2, sharex=True)
    panels = (
        (ax_eb, "eb_star", "EB* (attention probability difference, 0–1)", style.SERIES[0]),
        (ax_beh, "behaviour", "behaviour score (0–1)", style.SERIES[1]),
    )
    per_term = entry.get("per_term") or {}
    for ax, key, ylabel, s in panels:
        estimates = need(entry, key, where=where)
        if len(estimates) != len(revisions):
            raise MissingData(f"{where}: {key} has {len(estimates)} values for {len(revisions)}")
        for i, series in enumerate(per_term.values()):
            values = [np.nan if v is None else v for v in series.get(key) or []]
            if len(values) == len(revisions):
                label = "single terms" if i == 0 else None
                ax.plot(x, values, color="#999999", linewidth=0.5, alpha=0.5, label=label)
        value, low, high = style.columns(estimates, "value", "low", "high")
        ax.fill_between(x, low, high, color=s["color"], alpha=0.25, linewidth=0, label="95% CI")
        ax.plot(x, value, **s, linewidth=1.8, label="mean over terms")  # s: colour, marker, line
        ax.set_ylabel(ylabel)
        ax.legend(loc="best", fontsize=7)
    ax_beh.set_xticks(x, [str(r) for r in revisions])
    if len(revisions) > 4:
        ax_beh.tick_params(axis="x", labelrotation=35)
    ax_beh.set_xlabel("checkpoint (Hub revision, training order)")
    n_terms = len(per_term) or md.dig(entry, "leadlag", "n_terms")
    ax_eb.set_title(f"{style.short_label(model)}: emergence over training ({n_terms} terms)")
    caption = (
        f"{model}: EB* (top) and behaviour score (bottom) across checkpoints; line = mean "
        "over terms, band = 95% bootstrap CI over terms, grey = single terms."
    )
    return fig, caption


def lead_fraction(leadlag: dict, method: str, *, where: str = "summary") -> dict:
    """The Wilson estimate stored in the summary (figures read science, never compute it)."""
    return need(leadlag, "lead_fraction", method, where=where)


def leadlag_rows(models: dict[str, dict], *, where: str = "summary"):
    """Lead-lag results per (model, method), and (model, reason) where a model has none."""
    rows, skipped = [], []
    for model, entry in models.items():
        leadlag = entry.get("leadlag") or {}
        if not leadlag.get("n_lead") and not leadlag.get("lead_fraction"):
            skipped.append((model, leadlag.get("skipped") or "no lead-lag results stored"))
            continue
        for method in METHODS:
            if md.dig(leadlag, "n_lead", method) is None:
                continue
            est = lead_fraction(leadlag, method, where=f"{where} [{model}] leadlag")
            row: dict[str, Any] = {"model": model, "method": method, "fraction": est}
            row["n_lead"] = leadlag["n_lead"][method]
            # terms with a defined lead difference: the binomial test's n
            row["n"] = est.get("n", leadlag.get("n_terms"))
            row["p"] = md.dig(leadlag, "binomial", method, "p_value")
            row["mean_lead_diff"] = md.dig(leadlag, "mean_lead_diff", method)
            rows.append(row)
    return rows, skipped


def leadlag_forest(models: dict[str, dict], *, where: str = "summary"):
    """Per model and correlation method: lead fraction with its Wilson 95% CI."""
    rows, skipped = leadlag_rows(models, where=where)
    if not rows:
        reasons = "; ".join(f"{model}: {reason}" for model, reason in skipped)
        raise MissingData(f"{where} has no lead-lag results ({reasons})")
    fig, ax = style.new_figure(SIZES["sweep_leadlag"])
    ys = np.arange(len(rows))[::-1]
    ax.axvline(
        0.5, color=style.OKABE_ITO["black"], linestyle="--", linewidth=1, label="0.5 (no lead)"
    )
    for y, row in zip(ys, rows):
        method, est = row["method"], row["fraction"]
        s = style.SERIES[METHODS.index(method)]
        style.interval(
            ax, y, est, **s, filled=method == "pearson", lw=1.8, label=f"{method} (Wilson 95% CI)"
        )
    ax.set_yticks(ys, [f"{style.short_label(r['model'])} ({r['method']})" for r in rows])
    right = ax.secondary_yaxis("right")
    right.set_ticks(
        ys, labels=[f"{r['n_lead']}/{md.num(r['n'])}, p = {md.pvalue(r['p'])}" for r in rows]
    )
    right.tick_params(length=0)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("fraction of terms where EB* leads behaviour (0–1)")
    ax.set_title("lead-lag: does binding precede behaviour? (binomial p, one-sided)")
    style.figure_legend(fig, [ax], ncols=3)
    caption = (
        "Lead-lag forest plot: per model and correlation method, the fraction of terms where "
        "EB* leads behaviour (Wilson 95% CI), the count and the one-sided binomial p against "
        "0.5."
    )
    return fig, caption


def _tables(exp: ExperimentResults) -> list[str]:
    lines: list[str] = []
    for model, entry in exp.models.items():
        revisions = entry.get("revisions") or []
        eb = entry.get("eb_star") or [None] * len(revisions)
        beh = entry.get("behaviour") or [None] * len(revisions)
        rows = [[r, md.estimate(e), md.estimate(b)] for r, e, b in zip(revisions, eb, beh)]
        header = ["revision", "EB* [95% CI]", "behaviour [95% CI]"]
        lines += [f"**{model}**", "", *md.table(header, rows)]
    found, skipped = leadlag_rows(exp.models, where=exp.where)
    rows = [
        [
            r["model"],
            r["method"],
            f"{r['n_lead']}/{md.num(r['n'])}",
            md.estimate(r["fraction"]),
            md.pvalue(r["p"]),
            md.estimate(r["mean_lead_diff"]),
        ]
        for r in found
    ]
    rows += [[model, md.DASH, reason, md.DASH, md.DASH, md.DASH] for model, reason in skipped]
    header = ["model", "correlation", "EB* leads / terms", "lead fraction [Wilson 95% CI]"]
    lines += md.table(
        [*header, "binomial p (> 0.5)", "mean lead difference [95% CI]"], rows, left=3
    )
    rows = md.model_rows(exp.models, _decoupling_row)
    header = ["model", "note", "split (revisions early)", "terms", "strict", "attenuated"]
    lines += md.table([*header, "mean early correlation", "mean late correlation"], rows, left=2)
    return lines


def _decoupling_row(model: str, entry: dict) -> Iterator[list[str]]:
    d = entry.get("decoupling") or {}
    if d.get("skipped") or not d:
        yield [model, d.get("skipped") or "not stored", *[md.DASH] * 6]
    else:
        keys = ("split", "n_terms", "n_strict", "n_attenuate", "mean_early", "mean_late")
        yield [model, md.DASH, *md.nums(d, *keys)]


SECTION = Section("sweep", TITLE, md.prose("sweep"), SIZES, _plots, _tables, order=4)
