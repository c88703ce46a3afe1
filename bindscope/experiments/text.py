"""Plain-text tables of experiment summaries, for the terminal."""

from __future__ import annotations

from bindscope.results.format import DASH, num
from bindscope.results.format import estimate as est
from bindscope.results.format import heads as head_list
from bindscope.results.format import pvalue as pval


def summary_lines(summary: dict) -> list[str]:
    """Readable lines for any experiment's summary dict."""
    kind = str(summary.get("experiment"))
    fn = {
        "binding": _binding,
        "c5": _c5,
        "sweep": _sweep,
        "fewshot": _fewshot,
        "controls": _controls,
        "heads": _heads,
        "scan": _head_effects,
        "patching": _head_effects,
    }.get(kind)
    lines = fn(summary) if fn else [f"(no text view for experiment {kind!r})"]
    return lines + limit_lines(summary)


def limit_lines(summary: dict) -> list[str]:
    """The summary's own limits (``bindscope.experiments.limits``), one line each."""
    found = summary.get("limits") or []
    return [f"  limit ({f['kind']}): {f['message']}" for f in found]


def _binding(s: dict) -> list[str]:
    out = ["EB* (mean over prompts, 95% bootstrap CI)"]
    for label, m in s["models"].items():
        heads = head_list(m.get("top_heads"))
        out.append(
            f"  {label}: EB* {est(m.get('eb_star'))}  EB*/ceiling {est(m.get('eb_star_norm'))}"
            f"  n={m['n']} skipped={m['n_skipped']}  top heads {heads}"
        )
    return out


def _c5(s: dict) -> list[str]:
    out = [
        f"C5 head ablation: k={s['k']}, {s['n_random']} random sets, {s['ablation']} ablation "
        f"(drops are baseline minus ablated; 95% paired bootstrap CIs)"
    ]
    if s.get("design"):
        out.append(f"  design: {s['design']}")
    for label, m in s["models"].items():
        out.append(f"  {label}: top {m['top_heads']}  bottom {m['bottom_heads']}")
        header = f"    {'task':<12}{'baseline':>9}{'top':>8}{'bottom':>8}{'random':>8}"
        out.append(header + "   top drop               specificity            p      p_holm")
        for task in ("recognition", "generation"):
            cond = m["conditions"]
            if "baseline" not in cond or task not in cond["baseline"]:
                continue
            rand = [v[task] for c, v in cond.items() if c.startswith("random:") and task in v]
            out.append(
                f"    {task:<12}{num(cond['baseline'][task]):>9}"
                f"{num(cond.get('top', {}).get(task)):>8}{num(cond.get('bottom', {}).get(task)):>8}"
                f"{num(sum(rand) / len(rand) if rand else None):>8}   "
                f"{est(m['drops'].get('top', {}).get(task)):<23}"
                f"{est(m['specificity'].get(task)):<23}"
                f"{pval(m['p_value'].get(task)):<7}{pval(m.get('p_holm', {}).get(task))}"
            )
    return out


def _sweep(s: dict) -> list[str]:
    out = ["Checkpoint sweep (means over terms, 95% CI)"]
    for name, m in s["models"].items():
        out.append(f"  {name}")
        for rev, eb, beh in zip(m["revisions"], m["eb_star"], m["behaviour"]):
            out.append(f"    {rev:<28} EB* {est(eb):<24} behaviour {est(beh)}")
        ll = m.get("leadlag", {})
        if ll.get("skipped"):
            out.append(f"    lead-lag: skipped ({ll['skipped']})")
        else:
            for meth in ("pearson", "spearman"):
                if meth in ll.get("binomial", {}):
                    n = ll.get("n", {}).get(meth, ll["n_terms"])
                    left_out = len(ll.get("excluded", {})) + len(
                        ll.get("excluded_by_method", {}).get(meth, {})
                    )
                    out.append(
                        f"    lead-lag ({meth}): {ll['n_lead'][meth]}/{n} terms lead "
                        f"({left_out} excluded), "
                        f"fraction {est(ll['lead_fraction'][meth], digits=2)}, "
                        f"binomial p {pval(ll['binomial'][meth]['p_value'])}"
                    )
        dc = m.get("decoupling", {})
        if dc.get("skipped"):
            out.append(f"    decoupling: skipped ({dc['skipped']})")
        elif dc:
            out.append(
                f"    decoupling: {dc['n_strict']}/{dc['n_terms']} strict, "
                f"{dc['n_attenuate']} attenuate; mean rho early {num(dc['mean_early'], 2)}, "
                f"late {num(dc['mean_late'], 2)}"
            )
    return out


def _fewshot(s: dict) -> list[str]:
    out = ["Few-shot (C3): rubric score; delta in points vs zero-shot, paired bootstrap CI"]
    for label, m in s["models"].items():
        c = m["conditions"]
        out.append(
            f"  {label}: zero-shot {num(c.get('zero_shot'))}  few-shot {num(c.get('few_shot'))}"
            f"  paraphrase {num(c.get('paraphrase'))}  (n={m['n']})"
        )
        for cond in ("few_shot", "paraphrase"):
            if cond in m["delta_points"]:
                out.append(
                    f"    {cond:<11} delta {est(m['delta_points'][cond], digits=1)} points, "
                    f"paired permutation p {pval(m['test'][cond]['p_value'])}"
                )
    return out


def _controls(s: dict) -> list[str]:
    out = ["Discriminant validity: EB* real terms vs control groups (d = real - control)"]
    for label, m in s["models"].items():
        real = m["real"]
        out.append(
            f"  {label}: real terms EB* {est(real['eb_star'])} n={real['n']} "
            f"span {num(real['n_span_mean'], 1)} tokens"
        )
        out.append(
            f"    {'group':<20}{'fam':<5}{'n':>4}{'span':>6}  {'EB*':<24}{'d':<24}{'p_holm':<8}"
            "matched d (n)"
        )
        for g, row in m["groups"].items():
            mt = row["matched"]
            out.append(
                f"    {g:<20}{row.get('family') or DASH:<5}{row['n']:>4}"
                f"{num(row['n_span_mean'], 1):>6}  {est(row['eb_star']):<24}"
                f"{est(row.get('cohens_d'), digits=2):<24}{pval(row.get('p_holm')):<8}"
                f"{est(mt.get('cohens_d'), digits=2)} ({mt['n']})"
            )
    return out


def _heads(s: dict) -> list[str]:
    out = ["Head taxonomy (heads per class: mean score at or above its threshold)"]
    for label, m in s["models"].items():
        classes = m.get("classes") or {}
        counts = ", ".join(f"{c} {n}" for c, n in (classes.get("counts") or {}).items())
        out.append(f"  {label}: {counts}  (position 0 is BOS: {m.get('position_0_is_bos')})")
        top = m.get("binding_top") or []
        if top:
            overlap = m.get("binding_top_overlap") or {}
            heads = head_list(top)
            out.append(
                f"    binding top-{len(top)} {heads}: {overlap.get('sink', 0)} sink, "
                f"{overlap.get('previous_token', 0)} previous-token, "
                f"{overlap.get('induction', 0)} induction"
            )
    for model, e in (s.get("emergence") or {}).items():
        first = ", ".join(
            f"{c} at {(f or {}).get('revision') or 'never'}" for c, f in e["first"].items()
        )
        out.append(f"  {model}: first crossing: {first}")
        lead = e.get("induction_lead_tokens")
        if lead is not None:
            out.append(f"    induction leads sink formation by {lead:,} tokens")
    return out


def _head_effects(s: dict) -> list[str]:
    """Scan and patching: top conditions with CIs and adjusted p (issue 11)."""
    from bindscope.experiments.head_stats import summary_lines as head_lines

    return head_lines(s)
