"""C5's summary as terminal lines: per model, the scores, drops, p-values and nulls."""

from __future__ import annotations

from collections.abc import Iterator

from bindscope.experiments.kit.summary import per_model_text
from bindscope.results.format import estimate, num, pvalue


def text(s: dict) -> list[str]:
    """The C5 summary as terminal lines."""
    sampling = s.get("sampling", "fixed")
    sets = (
        f"random sets drawn sequentially (stop at {s.get('stop_at')} exceedances, at most "
        f"{s['n_random']})"
        if sampling == "sequential"
        else f"{s['n_random']} random sets"
    )
    header = [
        f"C5 head ablation: k={s['k']}, {sets}, {s['ablation']} ablation "
        f"(drops are baseline minus ablated; 95% paired bootstrap CIs)"
    ]
    if s.get("design"):
        header.append(f"  design: {s['design']}")
    return per_model_text(s, header, _model_lines)


def _model_lines(label: str, m: dict) -> Iterator[str]:
    yield f"  {label}: top {m['top_heads']}  bottom {m['bottom_heads']}"
    header = f"    {'task':<12}{'baseline':>9}{'top':>8}{'bottom':>8}{'random':>8}"
    yield header + "   top drop               specificity            p      p_holm"
    for task in ("recognition", "margin", "generation"):
        cond = m["conditions"]
        if "baseline" not in cond or task not in cond["baseline"]:
            continue
        drop = m["drops"].get("random_mean", {}).get(task)  # over the sets p used
        rand = None if drop is None else cond["baseline"][task] - drop
        yield (
            f"    {task:<12}{num(cond['baseline'][task]):>9}"
            f"{num(cond.get('top', {}).get(task)):>8}{num(cond.get('bottom', {}).get(task)):>8}"
            f"{num(rand):>8}   "
            f"{estimate(m['drops'].get('top', {}).get(task)):<23}"
            f"{estimate(m['specificity'].get(task)):<23}"
            f"{pvalue(m['p_value'].get(task)):<7}{pvalue(m.get('p_holm', {}).get(task))}"
        )
    for score, level in (m.get("chance") or {}).items():
        yield f"    chance level, {score}: {num(level)} (1/choices averaged over the items)"
    for null, by_score in (m.get("nulls") or {}).items():
        for score, t in by_score.items():
            power = (m.get("detectable_drop") or {}).get(score) if null == "random" else None
            yield (
                f"    {null} null, {score}: p {pvalue(t.get('p'))}{tail_words(t)} (Holm "
                f"{pvalue(t.get('p_holm'))} on the {t.get('holm_on', 'exact')} p) after "
                f"{t['n_drawn']} sets ({t['stopped']}; {support_words(t)})"
                + (f"; detectable drop {num(power)}" if power is not None else "")
            )
    match = m.get("class_match") or {}
    for head in match.get("heads", []):
        counts = (match.get("classes") or {}).get(head["class"], {})
        yield (
            f"    class match L{head['head'][0]}.H{head['head'][1]} ({head['class']}): mean "
            f"distance {num(head['distance'])} (typical {num(head['typical'])}); "
            f"{counts.get('outside')} {head['class']} head(s) outside the top set"
        )


def support_words(test: dict) -> str:
    """``support 9 distinct sets, p floor 0.100`` (or the floor of the sets asked for)."""
    support = test.get("support")
    said = f"support {support} distinct sets" if support is not None else "support not counted"
    return f"{said}, p floor {pvalue(test.get('p_floor'))}"


def tail_words(test: dict) -> str:
    """``, tail p 0.0004 [0.0001, 0.002] (GPD on 40 of 199)``, or why there is none."""
    tail = test.get("tail") or {}
    if tail.get("p") is not None:
        return (
            f", tail p {pvalue(tail['p'])} [{pvalue(tail['low'])}, {pvalue(tail['high'])}] "
            f"(GPD on {tail['n_tail']} of {tail['n_null']})"
        )
    why = {"no-fit": "no GPD fit passed", "too-few-sets": "too few sets for a tail fit"}
    return f", tail p not used: {why[tail['method']]}" if tail.get("method") in why else ""


__all__ = ["support_words", "tail_words", "text"]
