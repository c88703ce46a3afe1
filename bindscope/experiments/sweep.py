"""Checkpoint sweeps (``bindscope sweep``) and the analyses built on them: lead-lag (C1-B)
and decoupling (C4-B).

Per revision, every prompt gets its EB* and its behaviour score (recognition: 0/1 correct;
generation: rubric score). A term's series is the mean over its prompts at each revision.
Each revision is finished (and on disk) before the next is loaded, so a crash costs at most
the batch in flight and a rerun loads only the revisions that are not done.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bindscope.errors import InputError
from bindscope.experiments.common import (
    base_record,
    binding_metrics,
    mean_estimate,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
)
from bindscope.experiments.records import RecordWriter, read_records, write_summary
from bindscope.metrics import stats
from bindscope.metrics.behaviour import generation, recognition
from bindscope.metrics.binding import binding
from bindscope.prompts.context import check_fit

EXPERIMENT = "sweep"

_PYTHIA = [
    "step0",
    "step15000",
    "step30000",
    "step60000",
    "step90000",
    "step120000",
    "step140000",
    "step143000",
]
_CRFM = [f"checkpoint-{s}" for s in (0, 1000, 5000, 10000, 50000, 100000, 200000, 400000)]

#: Named revision lists from the published study (spec section 4.1). ``model`` is the Hub id
#: the preset belongs to; for Pythia it fits every size.
PRESETS: dict[str, dict] = {
    "pythia-paper": {"model": "EleutherAI/pythia-160m-deduped", "revisions": _PYTHIA},
    "olmo-1b": {
        "model": "allenai/OLMo-1B-hf",
        "revisions": [
            "step1000-tokens4B",
            "step80000-tokens335B",
            "step110000-tokens461B",
            "step330000-tokens1383B",
            "step460000-tokens1928B",
            "step620000-tokens2599B",
            "step720000-tokens3018B",
            "step738020-tokens3094B",
        ],
    },
    "crfm": {"model": "stanford-crfm/alias-gpt2-small-x21", "revisions": _CRFM},
    "smollm3": {
        "model": "HuggingFaceTB/SmolLM3-3B-checkpoints",
        "revisions": [
            f"stage1-step-{s}"
            for s in (40000, 120000, 400000, 800000, 1200000, 1600000, 2400000, 3440000)
        ],
    },
}
#: The five CRFM GPT-2 small seeds share the ``crfm`` revisions.
CRFM_SEEDS = [
    "stanford-crfm/alias-gpt2-small-x21",
    "stanford-crfm/battlestar-gpt2-small-x49",
    "stanford-crfm/caprica-gpt2-small-x81",
    "stanford-crfm/darkmatter-gpt2-small-x343",
    "stanford-crfm/expanse-gpt2-small-x777",
]


def resolve_revisions(spec: str | Sequence[str]) -> list[str]:
    """A preset name (``pythia-paper``, ``olmo-1b``, ``crfm``, ``smollm3``) or a list.

    Raises:
        InputError: The list is empty or has duplicates.
    """
    if isinstance(spec, str):
        if spec in PRESETS:
            return list(PRESETS[spec]["revisions"])
        spec = [s.strip() for s in spec.split(",") if s.strip()]
    revisions = list(spec)
    if not revisions:
        raise InputError(
            f"no revisions given; pass a comma-separated list or a preset ({', '.join(PRESETS)})"
        )
    dupes = sorted({r for r in revisions if revisions.count(r) > 1})
    if dupes:
        raise InputError(f"revision(s) {dupes} listed twice; each revision is one checkpoint")
    return revisions


def run(
    model: str,
    revisions: str | Sequence[str],
    *,
    prompts="canonical",
    out: str | Path,
    loader: Callable | None = None,
    rubric: dict | None = None,
    batch_size: int = 16,
    force: bool = False,
    progress: bool = True,
    **load_options,
) -> dict:
    """EB* and behaviour per prompt for each revision of ``model``; then the summary.

    Args:
        model: Hub id or folder.
        revisions: A preset name or the revisions in training order.
        loader: ``loader(model, revision=..., **load_options) -> Model``; default
            ``bindscope.load_model``.
    """
    from bindscope.loading import load_model

    loader = loader or load_model
    revisions = resolve_revisions(revisions)
    pset = prompt_set(prompts)
    folder = Path(out) / EXPERIMENT
    with RecordWriter(folder / "records.jsonl", force=force) as writer:
        for revision in revisions:
            keys = [record_key(EXPERIMENT, model, revision, r.key, "clean") for r in pset]
            if all(k in writer for k in keys):
                continue
            loaded = loader(model, revision=revision, **load_options)
            loaded.name, loaded.revision = model, revision
            _run_revision(loaded, pset, writer, rubric, batch_size, progress, revisions)
            del loaded
    return summarize(folder)


def _run_revision(model, pset, writer, rubric, batch_size, progress, revisions) -> None:
    check_fit(model, pset)
    prov = provenance(model, prompt_set=pset, sweep={"revisions": revisions})

    def work(chunk):
        bound = binding(model, chunk, batch_size=batch_size, on_missing="skip")
        scores: dict[str, float] = {}
        rec = [r for r in chunk if r.task == "recognition"]
        gen = [r for r in chunk if r.task == "generation"]
        for r, res in zip(rec, recognition(model, rec, batch_size=batch_size) if rec else []):
            scores[r.key] = float(res.correct)
        if gen:
            results = generation(model, gen, rubric=rubric, batch_size=batch_size)
            for r, res in zip(gen, results):
                scores[r.key] = res.score
        return [
            base_record(
                EXPERIMENT,
                model,
                r,
                "clean",
                {**binding_metrics(res, model), "behaviour": scores[r.key]},
                prov,
            )
            for r, res in zip(chunk, bound)
        ]

    run_chunks(
        pset.records,
        writer=writer,
        key=lambda r: record_key(EXPERIMENT, model.name, model.revision, r.key, "clean"),
        work=work,
        chunk_size=batch_size * 4,
        desc=f"sweep {model.name}@{model.revision}",
        progress=progress,
    )


def summarize_sweep(records: list[dict], *, seed: int = 0, split: int | None = None) -> dict:
    """Per model: per-revision means with CIs over terms, lead-lag and decoupling."""
    models: dict[str, dict] = {}
    by_model: dict[str, list[dict]] = {}
    for r in records:
        if r["experiment"] == EXPERIMENT:
            by_model.setdefault(r["model"], []).append(r)
    for name, group in by_model.items():
        declared = group[0]["provenance"].get("sweep", {}).get("revisions")
        present = {r["revision"] for r in group}
        revisions = [v for v in declared or sorted(present) if v in present]
        models[name] = _summarize_model(group, revisions, seed, split)
    return {"experiment": EXPERIMENT, "models": models}


def _term_series(group, revisions):
    cells: dict[str, dict[str, dict[str, list[float]]]] = {}
    for r in group:
        m = r["metrics"]
        cell = cells.setdefault(r["term"], {}).setdefault(r["revision"], {"eb": [], "beh": []})
        if m.get("eb_star") is not None:
            cell["eb"].append(m["eb_star"])
        if m.get("behaviour") is not None:
            cell["beh"].append(m["behaviour"])
    series = {}
    for term, by_rev in sorted(cells.items()):
        eb = [_mean(by_rev.get(v, {}).get("eb", [])) for v in revisions]
        beh = [_mean(by_rev.get(v, {}).get("beh", [])) for v in revisions]
        series[term] = {"eb_star": eb, "behaviour": beh}
    return series


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _summarize_model(group, revisions, seed, split) -> dict:
    series = _term_series(group, revisions)
    entry: dict = {"revisions": revisions, "per_term": series, "eb_star": [], "behaviour": []}
    for i in range(len(revisions)):
        for field in ("eb_star", "behaviour"):
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


def _varies(values) -> bool:
    return float(np.std(values)) >= 1e-9


def leadlag(series: dict[str, dict], *, seed: int = 0) -> dict:
    """C1-B: per term, does EB* lead behaviour (forward lag-1 correlation above backward)?

    Pearson and Spearman are both reported. Terms with a constant series are left out.
    """
    T = len(next(iter(series.values()))["eb_star"]) if series else 0
    if T < 4:
        return {"skipped": f"needs 4+ revisions with every term measured, got {T}"}
    per_term = {}
    for term, s in series.items():
        if not (_varies(s["eb_star"]) and _varies(s["behaviour"])):
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
    out: dict = {"n_terms": len(per_term), "per_term": per_term}
    if not per_term:
        out["skipped"] = "no term has a varying EB* and behaviour series"
        return out
    out.update(n_lead={}, binomial={}, lead_fraction={}, mean_lead_diff={})
    for m in ("pearson", "spearman"):
        diffs = [v[m]["lead_diff"] for v in per_term.values() if not math.isnan(v[m]["lead_diff"])]
        n_lead = sum(d > 0 for d in diffs)
        out["n_lead"][m] = n_lead
        if diffs:
            out["binomial"][m] = stats.binomial_leads(n_lead, len(diffs)).to_dict()
            out["lead_fraction"][m] = stats.wilson_ci(n_lead, len(diffs)).to_dict()
            out["mean_lead_diff"][m] = mean_estimate(diffs, seed=seed)
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
    early = [v["early"] for v in per_term.values()]
    late = [v["late"] for v in per_term.values()]
    return {
        "split": split,
        "method": "spearman",
        "n_terms": len(per_term),
        "n_strict": sum(e > 0 and lt <= 0 for e, lt in zip(early, late)),
        "n_attenuate": sum(e > 0 and lt < 0.5 * e for e, lt in zip(early, late)),
        "mean_early": _mean(early),
        "mean_late": _mean(late),
        "per_term": per_term,
    }


def summarize(folder: str | Path) -> dict:
    folder = Path(folder)
    summary = summarize_sweep(list(read_records(folder / "records.jsonl")))
    write_summary(folder / "summary.json", summary)
    return summary


__all__ = ["CRFM_SEEDS", "PRESETS", "decoupling", "leadlag", "resolve_revisions", "run"]
