"""Discriminant validity: EB* of control groups against real terms, with effect sizes."""

from __future__ import annotations

from bindscope.figures import markdown as md
from bindscope.figures import style
from bindscope.figures.markdown import DASH
from bindscope.figures.sections import Section
from bindscope.results.summaries import ExperimentResults, need

TITLE = "Discriminant validity (controls)"
SIZES = {"controls": (12.0, 5.0)}


def _groups(entry: dict, where: str) -> list[tuple[str, dict]]:
    groups = need(entry, "groups", where=where)
    return sorted(groups.items(), key=lambda kv: (str(kv[1].get("family")), kv[0]))


def group_means(label: str, entry: dict, *, where: str = "summary"):
    """Left: mean EB* per group with CIs; right: Cohen's d (all and span-matched) with CIs."""
    real = need(entry, "real", "eb_star", where=where)
    groups = _groups(entry, where)
    families = sorted({str(g.get("family")) for _, g in groups})
    look = {f: style.SERIES[i % len(style.SERIES)] for i, f in enumerate(families)}
    fig, (ax_mean, ax_d) = style.new_figure(SIZES["controls"], ncols=2, width_ratios=[1, 1])
    n_rows = len(groups) + 1
    ys = list(range(n_rows))[::-1]  # real terms on top
    style.interval(ax_mean, ys[0], real, color=style.OKABE_ITO["black"], marker="D")
    ax_mean.axvline(real["value"], color=style.OKABE_ITO["black"], linestyle=":", linewidth=1)
    names = [f"real terms (n={entry['real'].get('n', real.get('n'))})"]
    for y, (name, group) in zip(ys[1:], groups):
        s = look[str(group.get("family"))]
        style.interval(ax_mean, y, need(group, "eb_star", where=f"{where} {name}"), **s)
        names.append(f"{name} ({group.get('family') or '?'}, n={group.get('n')})")
    ax_mean.set_yticks(ys, names)
    ax_mean.set_xlabel("mean EB* (attention probability difference, 0–1), 95% CI")
    ax_mean.set_title(f"{style.short_label(label)}: mean EB* by group")

    ax_d.axvline(0, color=style.OKABE_ITO["black"], linewidth=0.8)
    p_labels = [""]
    for y, (_name, group) in zip(ys[1:], groups):
        s = look[str(group.get("family"))]
        style.interval(ax_d, y + 0.12, group.get("cohens_d"), **s)
        matched = (group.get("matched") or {}).get("cohens_d")
        style.interval(ax_d, y - 0.12, matched, **s, filled=False)
        mp = (group.get("matched") or {}).get("p_holm")
        p_labels.append(f"Holm p {md.pvalue(group.get('p_holm'))}; matched {md.pvalue(mp)}")
    ax_d.set_yticks(ys, p_labels)
    ax_d.yaxis.tick_right()
    ax_d.set_ylim(ax_mean.get_ylim())
    ax_d.spines["right"].set_visible(True)
    ax_d.spines["left"].set_visible(False)
    ax_d.set_xlabel("Cohen's d = (real − group) / pooled SD (SD units), 95% CI")
    ax_d.set_title("effect size: filled = all items, open = span-length matched")
    caption = (
        f"{label}: discriminant validity. Left, mean EB* per control group and for real terms "
        "(95% bootstrap CIs; dotted line = real-term mean). Right, Cohen's d against real "
        "terms (real minus group, pooled SD) for all items (filled) and span-length-matched "
        "items (open), with Holm p."
    )
    return fig, caption


def _tables(exp: ExperimentResults) -> list[str]:
    lines: list[str] = []
    header = ["group", "family", "n", "span tokens", "mean EB* [95% CI]"]
    header += ["d, real − control [95% CI]", "p", "Holm p", "matched n (real/control)"]
    header += ["matched d [95% CI]", "matched Holm p"]
    for label, entry in exp.models.items():
        where = f"{exp.where} [{label}]"
        real = entry.get("real") or {}
        n_real = real.get("n", md.dig(real, "eb_star", "n"))
        rows = [[*_group_cells("real terms", DASH, n_real, real), *[DASH] * 6]]
        for name, g in _groups(entry, where):
            matched = g.get("matched") or {}
            n = md.num(matched.get("n"))
            n_pair = n if matched.get("n_real") is None else f"{matched['n_real']}/{n}"
            rows.append(
                [
                    *_group_cells(name, g.get("family") or DASH, g.get("n"), g),
                    md.estimate(g.get("cohens_d"), 2),
                    md.pvalue(md.dig(g, "test", "p_value")),
                    md.pvalue(g.get("p_holm")),
                    n_pair,
                    md.estimate(matched.get("cohens_d"), 2),
                    md.pvalue(matched.get("p_holm")),
                ]
            )
        lines += [f"**{label}**", "", *md.table(header, rows, left=2)]
    return lines


def _group_cells(name: str, family: str, n: float | None, group: dict) -> list[str]:
    n_span = md.num(group.get("n_span_mean"), 2)
    return [name, family, md.num(n), n_span, md.estimate(group.get("eb_star"))]


plots = style.model_plots(("controls", group_means))
SECTION = Section("controls", TITLE, md.prose("controls"), SIZES, plots, _tables, order=2)
