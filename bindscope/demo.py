"""``bindscope demo``: the study on the three embedded models, end to end, on a laptop CPU."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from bindscope import loading
from bindscope.errors import InputError
from bindscope.experiments import binding, c5, controls, fewshot
from bindscope.experiments.c5 import C5Options
from bindscope.experiments.c5_presets import POWERED_N_RANDOM
from bindscope.experiments.kit.registry import summary_lines
from bindscope.figures import FigureReport, make_figures, write_report
from bindscope.prompts.prompt_sets import PromptSet, load
from bindscope.protocols import LanguageModel

#: The models the demo runs, in order: None is the default (SmolLM2-135M-Instruct).
DEMO_MODELS = (None, "gemma-3-270m", "qwen2.5-coder-0.5b")
QUICK_TERMS = ("screen reader", "alt text", "skip link", "focus indicator")
#: C5 evaluates only the True/False item of every term: ``DEMO_C5_DESIGN``, stored with the
#: records, says why and what it costs in power (benchmarks/README.md, "C5 power against time").
DEMO_C5_IDS = ("rec_003",)
DEMO_N_RANDOM = 59
DEMO_STOP_AT = 10
DEMO_K = 4
POWERED_COMMAND = "make c5-powered"
DEMO_C5_DESIGN = (
    "the demo evaluates recognition only ({items} item x {terms} terms: the True/False "
    "question) under the random null, drawn sequentially: it stops once {h} random sets "
    "drop at least as much as the top set, else at {n} sets (p down to 1/{n1}, Holm's "
    "0.05/3); the design fits 15 minutes of C5 for three models (benchmarks/c5_frontier.py), "
    "and `make c5-powered` adds the other items and a layer-matched null. One of the five "
    "recognition items per term "
    "costs power: the detectable drop's excess over the random sets' mean is about "
    "sqrt(5) = 2.2 times what all five would give (the detectable drop per model is in "
    "the nulls table); generation is left out because SmolLM2's "
    "rubric baseline is about 0.016, at the floor, where a drop cannot show (bindscope c5 "
    "runs both). Every model's top, bottom and random sets hold k = {k} heads, the "
    "published design's k; the models have different head counts, so the share of heads "
    "one set ablates differs by model (the heads table gives it)"
)
DEMO_FEWSHOT_IDS = ("gen_001", "gen_002")


def _digest(pset: PromptSet, chosen: Iterable[str]) -> str:
    return hashlib.sha256((pset.sha256 + "|" + ",".join(sorted(chosen))).encode()).hexdigest()


def subset(pset: PromptSet, terms: Iterable[str]) -> PromptSet:
    """The records of ``pset`` whose term (or control source) is in ``terms``."""
    terms = set(terms)
    keep = tuple(r for r in pset if r.term in terms or r.extra.get("source_term") in terms)
    return PromptSet(f"{pset.name}-quick", keep, _digest(pset, terms))


def by_prompt_id(pset: PromptSet, ids: Collection[str]) -> PromptSet:
    """The records of ``pset`` whose ``prompt_id`` is in ``ids`` (every term kept)."""
    keep = tuple(r for r in pset if r.prompt_id in set(ids))
    return PromptSet(f"{pset.name}-{'+'.join(ids)}", keep, _digest(pset, ids))


def quick_controls(pset: PromptSet, per_group: int = 3) -> PromptSet:
    """The first ``per_group`` terms of every control group."""
    chosen: dict[str, list[str]] = {}
    for r in pset:
        names = chosen.setdefault(r.control_group, [])
        if r.term not in names and len(names) < per_group:
            names.append(r.term)
    keep = tuple(r for r in pset if r.term in chosen.get(r.control_group, []))
    return PromptSet(f"{pset.name}-quick", keep, pset.sha256[:32] + "quick")


def run(
    out: str | Path = "bindscope-demo",
    *,
    quick: bool = False,
    progress: bool = True,
    models: Sequence[LanguageModel | str | None] | None = None,
    force: bool = False,
) -> dict:
    """Run the demo study on each model and print its tables; returns ``{experiment: summary}``.

    ``models`` (loaded or names; default ``DEMO_MODELS``) write side by side in ``out``;
    ``quick`` runs a few terms; ``force`` discards ``out``'s finished records.
    """
    out = Path(out)
    started = time.perf_counter()
    chosen = list(DEMO_MODELS if models is None else models)
    _check_installed(chosen, defaults=models is None)
    canonical, control_set = load("canonical"), load("controls")
    if quick:
        canonical, control_set = subset(canonical, QUICK_TERMS), quick_controls(control_set)
    summaries: dict = {}
    minutes: dict[str, float] = {}
    for i, spec in enumerate(chosen):
        t0 = time.perf_counter()
        loaded = _load(spec)
        steps = _steps(canonical, control_set)
        summaries |= _run_steps(loaded, steps, out, force=force and i == 0, progress=progress)
        minutes[loaded.name] = (time.perf_counter() - t0) / 60
    t0 = time.perf_counter()
    figures, report = _figures_and_report(out, summaries)
    _print_tables(summaries, figures, report)
    split = ", ".join(f"{name} {m:.1f} min" for name, m in minutes.items())
    drawing = time.perf_counter() - t0
    print(f"time per model (load included): {split}; figures and report {drawing:.0f} s")
    print(f"demo finished in {(time.perf_counter() - started) / 60:.1f} min; results in {out}/")
    return summaries


def _run_steps(
    loaded: LanguageModel, steps: list, out: Path, *, force: bool, progress: bool
) -> dict[str, dict]:
    summaries = {}
    for name, run_step, options in steps:
        t1 = time.perf_counter()
        summaries[name] = run_step(loaded, out=out, force=force, progress=progress, **options)
        print(f"[{loaded.name} {name}] done in {time.perf_counter() - t1:.0f} s")
    return summaries


def _figures_and_report(out: Path, summaries: dict) -> tuple[FigureReport, Path]:
    figures = make_figures(out)
    report = write_report(out, figures=figures)
    if "c5" in summaries:  # where the demo's power stops, and the command that goes further
        statement = power_statement(summaries["c5"])
        report.write_text(report.read_text("utf-8") + "\n" + statement + "\n", "utf-8")
    return figures, report


def _print_tables(summaries: dict, figures: FigureReport, report: Path) -> None:
    print()
    for summary in summaries.values():
        for line in summary_lines(summary):
            print(line)
        print()
    for line in figures.lines():
        print(line)
    print(f"report: {report}")


def power_statement(c5_summary: dict, score: str = "recognition") -> str:
    """The report's section on where the demo's C5 power stops: each model's detectable drop."""
    n_random = c5_summary.get("n_random")
    lines = ["## Where the demo's power stops", ""]
    for label, entry in c5_summary.get("models", {}).items():
        drop = (entry.get("detectable_drop") or {}).get(score)
        mean = _mean(entry.get("random_drops", {}).get(score))
        nulls = ", ".join(entry.get("nulls", {})) or "random"
        text = "not computed (fewer than 2 sets or items)" if drop is None else f"{drop:.3f}"
        above = "" if drop is None or mean is None else f" ({drop - mean:.3f} above the "
        above += "random sets' mean drop)" if above else ""
        lines.append(
            f"- {label}: detectable {score} drop {text}{above}, random null (nulls run: "
            f"{nulls}; the detectable drop is stated for the random null)"
        )
    lines += [
        "",
        f'A smaller top-set drop reads as "can\'t tell" in this design ({n_random} sets per '
        f"null at most, one recognition item per term). `{POWERED_COMMAND}` (`bindscope c5 "
        "--preset powered`) goes further: all 205 recognition items, the random and a "
        f"layer-matched null of up to {POWERED_N_RANDOM} sets each (the GPD tail p down to "
        "0.005 and below), Holm across the three "
        'models; benchmarks/README.md ("C5 power against time") predicts its power and time.',
    ]
    return "\n".join(lines)


def _mean(values: list | None) -> float | None:
    return sum(values) / len(values) if values else None


def _check_installed(chosen: list, *, defaults: bool) -> None:
    # a missing package fails now, not after the first model's run
    for spec in chosen:
        if spec is None or isinstance(spec, str):
            if defaults and loading.embedded(spec) is None:
                raise InputError(
                    f"the demo's model {spec!r} is not an embedded model of this install; "
                    "update bindscope, or pass --model for each model to run"
                )
            loading.check_embedded(spec)


def _load(spec: Any):
    if spec is not None and not isinstance(spec, str):
        return spec
    t0 = time.perf_counter()
    loaded = loading.load_model(spec)  # looked up now: a test may stand in for it
    print(f"[{loaded.name}] loaded in {time.perf_counter() - t0:.0f} s")
    return loaded


def _steps(canonical: PromptSet, control_set: PromptSet) -> list:
    design = DEMO_C5_DESIGN.format(
        items=len(DEMO_C5_IDS),
        terms=len({r.term for r in canonical}),
        h=DEMO_STOP_AT,
        n=DEMO_N_RANDOM,
        n1=DEMO_N_RANDOM + 1,
        k=DEMO_K,
    )
    # the random null only: the frontier's 15-minute point (power_statement says its limit)
    c5_options = C5Options(
        prompts=by_prompt_id(canonical, DEMO_C5_IDS),
        ranking=canonical,
        k=DEMO_K,
        n_random=DEMO_N_RANDOM,
        stop_at=DEMO_STOP_AT,
        design=design,
    ).keywords()
    return [
        ("binding", binding.run, {"prompts": canonical}),
        ("c5", c5.run, c5_options),
        ("controls", controls.run, {"controls": control_set, "real": canonical}),
        ("fewshot", fewshot.run, {"prompts": by_prompt_id(canonical, DEMO_FEWSHOT_IDS)}),
    ]
