"""``bindscope demo``: the study on the two embedded models, end to end, on a laptop CPU.

For SmolLM2-135M-Instruct (instruction-tuned, Llama architecture, 30 x 9 = 270 heads) and
Gemma 3 270M (pretrained base, sliding-window attention, 18 x 4 = 72 heads) in turn: EB* on
the canonical prompts, C5 (k=4, 39 random sets, zero ablation), discriminant validity and
few-shot; records and summaries under ``OUT/`` (both models in the same records, side by
side in every table), then figures and one report. Rerunning resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from bindscope import loading
from bindscope.experiments import binding, c5, controls, fewshot
from bindscope.experiments.registry import summary_lines
from bindscope.figures import make_figures, write_report
from bindscope.prompts.records import PromptSet, load

#: The models the demo runs, in order: None is the default (SmolLM2-135M-Instruct).
DEMO_MODELS = (None, "gemma-3-270m")
QUICK_TERMS = ("screen reader", "alt text", "skip link", "focus indicator")
#: C5 evaluates 2 recognition items of every term (82 of the 451 prompts, all 41 terms): the
#: definitional question (rec_001, four choices) and the True/False one (rec_003), under 39
#: random sets per model, so its rank p-value can reach 1/40 = 0.025; few-shot 2 stems per
#: term. Two items, not more, so both models fit a 15-minute budget on 2 cores: one item
#: under one condition costs about 0.23 s of one busy core on SmolLM2 and 0.25 s on Gemma 3
#: for rec_001, a fifth of that for a True/False item (one-token choices need no choice
#: pass), and C5 runs 42 conditions. Generation is left out of the demo's C5: SmolLM2's rubric
#: baseline is about 0.016, at the floor, so an ablation has no room to lower it and the
#: budget goes to the null instead. Heads are still ranked on all canonical prompts, and
#: binding and controls use every prompt. ``bindscope c5`` and ``bindscope fewshot``
#: evaluate every prompt.
DEMO_C5_IDS = ("rec_001", "rec_003")
DEMO_N_RANDOM = 39
DEMO_K = 4
DEMO_C5_DESIGN = (
    "the demo evaluates recognition only ({items} items x {terms} terms) under {n} random "
    "sets per model (p down to 1/{n1}); generation is left out because SmolLM2's rubric "
    "baseline is about 0.016, at the floor, where a drop cannot show (bindscope c5 runs "
    "both). Every model's top, bottom and random sets hold k = {k} heads, the published "
    "design's k; the models have different head counts, so the share of heads one set "
    "ablates differs by model (the heads table gives it)"
)
DEMO_FEWSHOT_IDS = ("gen_001", "gen_002")


def subset(pset: PromptSet, terms) -> PromptSet:
    """The records of ``pset`` whose term (or control source) is in ``terms``."""
    terms = set(terms)
    keep = tuple(r for r in pset if r.term in terms or r.extra.get("source_term") in terms)
    digest = hashlib.sha256((pset.sha256 + "|" + ",".join(sorted(terms))).encode()).hexdigest()
    return PromptSet(f"{pset.name}-quick", keep, digest)


def by_prompt_id(pset: PromptSet, ids) -> PromptSet:
    """The records of ``pset`` whose ``prompt_id`` is in ``ids`` (every term kept)."""
    keep = tuple(r for r in pset if r.prompt_id in set(ids))
    digest = hashlib.sha256((pset.sha256 + "|" + ",".join(sorted(ids))).encode()).hexdigest()
    return PromptSet(f"{pset.name}-{'+'.join(ids)}", keep, digest)


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
    model=None,
    models=None,
    n_random: int = DEMO_N_RANDOM,
    force: bool = False,
) -> dict:
    """Run the demo study on each model and print its tables; returns ``{experiment: summary}``.

    Args:
        out: Results folder; every model's records go to the same experiment folders.
        quick: A few terms only (a smoke test).
        progress: Show progress bars.
        model: One loaded model to run instead of ``models`` (tests use a tiny one).
        models: Loaded models or ``load_model`` names, run in turn (default ``DEMO_MODELS``:
            SmolLM2-135M-Instruct, then gemma-3-270m).
        n_random: Random head sets per model in C5.
        force: Discard the finished records in ``out`` (needed to switch between quick and
            full in one folder); only the first model's steps discard, so the models' records
            still end up side by side.

    C5 evaluates ``DEMO_C5_IDS`` of every term (heads ranked on all canonical prompts) and
    few-shot ``DEMO_FEWSHOT_IDS``; binding and controls use every prompt.
    """
    out = Path(out)
    started = time.perf_counter()
    chosen = [model] if model is not None else list(DEMO_MODELS if models is None else models)
    for spec in chosen:  # a missing package fails now, not after the first model's run
        if spec is None or isinstance(spec, str):
            loading.check_embedded(spec)
    canonical, control_set = load("canonical"), load("controls")
    if quick:
        canonical, control_set = subset(canonical, QUICK_TERMS), quick_controls(control_set)
    summaries: dict = {}
    minutes: dict[str, float] = {}
    for i, spec in enumerate(chosen):
        t0 = time.perf_counter()
        loaded = _load(spec)
        for name, run_step, options in _steps(canonical, control_set, n_random):
            t1 = time.perf_counter()
            summaries[name] = run_step(
                loaded, out=out, force=force and i == 0, progress=progress, **options
            )
            print(f"[{loaded.name} {name}] done in {time.perf_counter() - t1:.0f} s")
        minutes[loaded.name] = (time.perf_counter() - t0) / 60
    t0 = time.perf_counter()
    figures = make_figures(out)
    report = write_report(out, figures=figures)
    print()
    for summary in summaries.values():
        for line in summary_lines(summary):
            print(line)
        print()
    for line in figures.lines():
        print(line)
    print(f"report: {report}")
    split = ", ".join(f"{name} {m:.1f} min" for name, m in minutes.items())
    drawing = time.perf_counter() - t0
    print(f"time per model (load included): {split}; figures and report {drawing:.0f} s")
    print(f"demo finished in {(time.perf_counter() - started) / 60:.1f} min; results in {out}/")
    return summaries


def _load(spec):
    """A loaded model, or ``load_model(spec)`` for a name (None: the default), timed."""
    if spec is not None and not isinstance(spec, str):
        return spec
    t0 = time.perf_counter()
    loaded = loading.load_model(spec)  # looked up now: a test may stand in for it
    print(f"[{loaded.name}] loaded in {time.perf_counter() - t0:.0f} s")
    return loaded


def _steps(canonical: PromptSet, control_set: PromptSet, n_random: int) -> list:
    """The demo's experiments on one model, in order: ``(name, run, options)``.

    Each ``run`` is an experiment's ``run(model, out=, force=, progress=, **options)``.
    """
    design = DEMO_C5_DESIGN.format(
        items=len(DEMO_C5_IDS),
        terms=len({r.term for r in canonical}),
        n=n_random,
        n1=n_random + 1,
        k=DEMO_K,
    )
    c5_options = {
        "prompts": by_prompt_id(canonical, DEMO_C5_IDS),
        "ranking": canonical,
        "k": DEMO_K,
        "n_random": n_random,
        "ablation": "zero",
        "design": design,
    }
    return [
        ("binding", binding.run, {"prompts": canonical}),
        ("c5", c5.run, c5_options),
        ("controls", controls.run, {"controls": control_set, "real": canonical}),
        ("fewshot", fewshot.run, {"prompts": by_prompt_id(canonical, DEMO_FEWSHOT_IDS)}),
    ]
