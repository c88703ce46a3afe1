"""Checkpoint sweeps (``bindscope sweep``) and the analyses built on them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bindscope.experiments.kit import limits
from bindscope.experiments.kit.binding_reuse import reuse_or_bind
from bindscope.experiments.kit.chunks import batch_order, chunk_items, prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, LazyModel, ModelRun, Plan
from bindscope.experiments.kit.options import (
    generation_batch_option,
    option,
    prompts_option,
    setting,
)
from bindscope.experiments.kit.revisions import load_revision, resolve_revisions
from bindscope.experiments.kit.summary import (
    by_name,
    folder_summary,
    mean_estimate,
    per_model_view,
    skipped_reasons,
)
from bindscope.experiments.kit.taxonomy_plan import TaxonomyOptions, taxonomy_plan
from bindscope.experiments.kit.taxonomy_summary import TAXONOMY
from bindscope.loading import load_model
from bindscope.metrics import stats
from bindscope.metrics.behaviour import default_rubric
from bindscope.prompts.context import check_fit
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.format import estimate, num, pvalue
from bindscope.results.labels import checkpoint_order
from bindscope.results.records import provenance
from bindscope.results.schema import binding_kind
from bindscope.results.settings import content_sha256
from bindscope.runners.behaviour import generation, recognition

EXPERIMENT = "sweep"
#: The per-term series: EB* and the behaviour score at each revision.
SERIES = ("eb_star", "behaviour")


@dataclass(frozen=True)
class SweepOptions(TaxonomyOptions):
    """``bindscope sweep``'s options; ``loader(model, revision=, **load_options)``: load_model."""

    revisions: str | Sequence[str] = option(
        (),
        "comma-separated revisions in training order, or a preset: "
        "pythia-paper, olmo-1b, crfm, smollm3",
        required=True,
    )
    prompts: str | Path | PromptSet = prompts_option()
    heads: bool = option(False, "also the head taxonomy per revision (OUT/heads)", switch=True)
    generation_batch_size: int = generation_batch_option()
    rubric: dict | None = setting(None)
    loader: Callable[..., LanguageModel] | None = setting(None)
    load_options: dict | None = setting(None)

    def check(self) -> None:
        """Revisions resolve (a preset or a list without repeats)."""
        super().check()
        resolve_revisions(self.revisions)


def run(model: str, revisions: str | Sequence[str] | None = None, **keywords: Any) -> dict:
    """EB* and behaviour per prompt for each revision of ``model``; then the summary."""
    if revisions is not None:
        keywords["revisions"] = revisions
    return DEFINITION.run(model, **keywords)


def _plan(models: list[str], opts: SweepOptions, common: Common) -> Plan:
    loader = opts.loader or load_model
    revisions = resolve_revisions(opts.revisions)
    pset = prompt_set(opts.prompts)
    rubric = opts.rubric or default_rubric()
    seed = common.seed
    settings = {"prompt_sha256": pset.sha256, "rubric_sha256": content_sha256(rubric), "seed": seed}
    load_options = opts.load_options or {}
    lazy = [  # models: the --model id (none when only the settings are asked for)
        LazyModel(model, revision, partial(load_revision, loader, model, revision, **load_options))
        for model in models
        for revision in revisions
    ]
    sweep = {"revisions": revisions}

    def prov(loaded: LanguageModel) -> dict:
        return provenance(loaded, prompt_set=pset, seed=seed, settings=settings, sweep=sweep)

    def each(run: ModelRun) -> None:
        _run_revision(run, pset, rubric, (common.batch_size, opts.generation_batch_size))

    def items() -> list[tuple[str, str]]:
        return [(r.key, "clean") for r in pset]

    also = ((TAXONOMY, taxonomy_plan(pset, opts, common, sweep=sweep)),) if opts.heads else ()
    return Plan(settings, each, provenance=prov, models=lazy, items=items, also=also)


def _run_revision(run: ModelRun, pset: PromptSet, rubric: dict, sizes: tuple[int, int]) -> None:
    model = run.model
    batch_size, generation_batch_size = sizes
    check_fit(model, pset)

    def work(chunk: list[PromptRecord]) -> list[dict]:
        bound = reuse_or_bind(run, chunk, batch_size=batch_size)
        rec = [r for r in chunk if r.task == "recognition"]
        gen = [r for r in chunk if r.task == "generation"]
        recognised = recognition(model, rec, batch_size=batch_size) if rec else []
        scores = {r.key: float(res.correct) for r, res in zip(rec, recognised)}
        if gen:
            generated = generation(model, gen, rubric=rubric, batch_size=generation_batch_size)
            scores |= {r.key: out.score for r, out in zip(gen, generated)}
        return [run.record(r, "clean", {**m, "behaviour": scores[r.key]}) for r, m, _ in bound]

    run.chunks(
        batch_order(model, pset.records),
        work,
        chunk_size=chunk_items(batch_size, generation_batch_size, batch_size * 4),
        desc=f"sweep {model.name}@{model.revision}",
    )


def summarize_sweep(
    records: list[dict], *, seed: int | None = None, split: int | None = None
) -> dict:
    """Per model: per-revision means with CIs over terms, lead-lag and decoupling."""
    models: dict[str, dict] = {}
    found: list[dict] = []
    for name, group in by_name(records, EXPERIMENT).items():
        used = (group[0]["provenance"].get("seed") or 0) if seed is None else seed
        models[name] = _summarize_model(group, checkpoint_order(group), used, split)
        found += _sweep_limits(name, group, models[name])
    return {"experiment": EXPERIMENT, "models": models, "limits": found}


def _sweep_limits(name: str, group: list[dict], entry: dict) -> list[dict]:
    last = entry["revisions"][-1]
    prompts = [r for r in group if r["revision"] == last]
    found = [limits.excluded(name, skipped_reasons(prompts), "EB* (every checkpoint)")]
    behaviour = entry["behaviour"][-1]
    if behaviour is not None:
        found.append(limits.floor_ceiling(f"{name}@{last}", "behaviour", behaviour["value"]))
    for test, result in (("lead-lag", entry["leadlag"]), ("decoupling", entry["decoupling"])):
        if "skipped" in result:
            found.append(limits.not_run(name, test, result["skipped"], len(entry["revisions"])))
    left_out = entry["leadlag"].get("excluded") or {}
    if left_out:
        found.append(limits.excluded(name, {"constant series": len(left_out)}, "lead-lag (terms)"))
    for method, n in (entry["leadlag"].get("n") or {}).items():
        found.append(limits.binomial_resolution(name, f"lead-lag binomial test ({method})", n))
    return limits.collect(*found)


def _term_series(group: list[dict], revisions: list[str]) -> dict[str, dict]:
    cells: dict[str, dict[tuple[str, str], list[float]]] = {}
    for r in group:
        for field in SERIES:
            values = cells.setdefault(r["term"], {}).setdefault((field, r["revision"]), [])
            if r["metrics"].get(field) is not None:
                values.append(r["metrics"][field])
    return {
        term: {field: [_mean(by.get((field, v), [])) for v in revisions] for field in SERIES}
        for term, by in sorted(cells.items())
    }


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _summarize_model(group: list[dict], revisions: list[str], seed: int, split: int | None) -> dict:
    series = _term_series(group, revisions)
    entry: dict = {"revisions": revisions, "per_term": series, "eb_star": [], "behaviour": []}
    for i in range(len(revisions)):
        for field in SERIES:
            values = [s[field][i] for s in series.values() if not math.isnan(s[field][i])]
            entry[field].append(mean_estimate(values, seed=seed) if values else None)
    complete = {
        t: s
        for t, s in series.items()
        if not any(math.isnan(x) for x in s["eb_star"] + s["behaviour"])
    }
    entry["leadlag"] = leadlag(complete, seed=seed)
    entry["decoupling"] = decoupling(complete, split=split)
    return entry


def leadlag(series: dict[str, dict], *, seed: int = 0) -> dict:
    """C1-B: per term, does EB* lead behaviour (forward lag-1 correlation above backward)?"""
    T = len(next(iter(series.values()))["eb_star"]) if series else 0
    if T < 4:
        return {"skipped": f"needs 4+ revisions with every term measured, got {T}"}
    per_term: dict[str, dict] = {}
    excluded: dict[str, str] = {}
    for term, s in series.items():
        if stats.is_constant(s["eb_star"]) or stats.is_constant(s["behaviour"]):
            excluded[term] = "constant series"
            continue
        lagged = stats.lagged_correlations(s["eb_star"], s["behaviour"])
        per_term[term] = {
            m: {
                "forward": lagged[m]["forward"].statistic,
                "backward": lagged[m]["backward"].statistic,
                "lead_diff": lagged[m]["lead_diff"],
            }
            for m in ("pearson", "spearman")
        }
    out: dict = {"n_terms": len(per_term), "per_term": per_term, "excluded": excluded}
    if not per_term:
        out["skipped"] = "no term has a varying EB* and behaviour series"
        return out
    out.update(n={}, excluded_by_method={}, n_lead={}, binomial={}, lead_fraction={})
    out["mean_lead_diff"] = {}
    for m in ("pearson", "spearman"):
        diffs = {t: v[m]["lead_diff"] for t, v in per_term.items()}
        defined = [d for d in diffs.values() if not math.isnan(d)]
        out["excluded_by_method"][m] = {
            t: "lagged correlation undefined (a constant window)"
            for t, d in diffs.items()
            if math.isnan(d)
        }
        n_lead = sum(d > 0 for d in defined)
        out["n"][m] = len(defined)
        out["n_lead"][m] = n_lead
        if defined:
            out["binomial"][m] = stats.binomial_leads(n_lead, len(defined)).to_dict()
            out["lead_fraction"][m] = stats.wilson_ci(n_lead, len(defined)).to_dict()
            out["mean_lead_diff"][m] = mean_estimate(defined, seed=seed)
    return out


def decoupling(series: dict[str, dict], *, split: int | None = None) -> dict:
    """C4-B: Spearman of EB* with behaviour in an early and a late window, per term."""
    T = len(next(iter(series.values()))["eb_star"]) if series else 0
    split = T // 2 if split is None else split
    if split < 3 or T - split < 3:
        return {"skipped": f"needs 3+ revisions in each window, got {T} split at {split}"}
    per_term = {}
    for term, s in series.items():
        windows = stats.windowed_correlation(
            s["eb_star"], s["behaviour"], split=split, method="spearman"
        )
        early, late = windows["early"].statistic, windows["late"].statistic
        if math.isnan(early) or math.isnan(late):
            continue
        per_term[term] = {"early": early, "late": late}
    earlies = [v["early"] for v in per_term.values()]
    lates = [v["late"] for v in per_term.values()]
    return {
        "split": split,
        "method": "spearman",
        "n_terms": len(per_term),
        "n_strict": sum(e > 0 and lt <= 0 for e, lt in zip(earlies, lates)),
        "n_attenuate": sum(e > 0 and lt < 0.5 * e for e, lt in zip(earlies, lates)),
        "mean_early": _mean(earlies),
        "mean_late": _mean(lates),
        "per_term": per_term,
    }


summarize = folder_summary(EXPERIMENT, summarize_sweep)


def _model_lines(name: str, m: dict) -> Iterator[str]:
    yield f"  {name}"
    for rev, eb, beh in zip(m["revisions"], m["eb_star"], m["behaviour"]):
        yield f"    {rev:<28} EB* {estimate(eb):<24} behaviour {estimate(beh)}"
    yield from _leadlag_lines(m.get("leadlag", {}))
    dc = m.get("decoupling", {})
    if dc.get("skipped"):
        yield f"    decoupling: skipped ({dc['skipped']})"
    elif dc:
        yield (
            f"    decoupling: {dc['n_strict']}/{dc['n_terms']} strict, "
            f"{dc['n_attenuate']} attenuate; mean rho early {num(dc['mean_early'], 2)}, "
            f"late {num(dc['mean_late'], 2)}"
        )


def _leadlag_lines(ll: dict) -> list[str]:
    if ll.get("skipped"):
        return [f"    lead-lag: skipped ({ll['skipped']})"]
    out = []
    for meth in ("pearson", "spearman"):
        if meth in ll.get("binomial", {}):
            n = ll.get("n", {}).get(meth, ll["n_terms"])
            left_out = len(ll.get("excluded", {})) + len(
                ll.get("excluded_by_method", {}).get(meth, {})
            )
            out.append(
                f"    lead-lag ({meth}): {ll['n_lead'][meth]}/{n} terms lead "
                f"({left_out} excluded), "
                f"fraction {estimate(ll['lead_fraction'][meth], digits=2)}, "
                f"binomial p {pvalue(ll['binomial'][meth]['p_value'])}"
            )
    return out


text = per_model_view("Checkpoint sweep (means over terms, 95% CI)", _model_lines)
DEFINITION = Experiment(
    EXPERIMENT, "sweep", "EB* and behaviour across training checkpoints", SweepOptions,
    summarize, text, records=(binding_kind(EXPERIMENT, "behaviour"),), plan=_plan,
    models="revisions", also=lambda options: (TAXONOMY,) if options.heads else (),
)  # fmt: skip

__all__ = [
    "DEFINITION",
    "SweepOptions",
    "checkpoint_order",
    "decoupling",
    "leadlag",
    "resolve_revisions",
    "run",
    "summarize",
    "text",
]
