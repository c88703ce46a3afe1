"""Checkpoint sweeps (``bindscope sweep``) and the analyses built on them.

The analyses are lead-lag (C1-B) and decoupling (C4-B).

Per revision, every prompt gets its EB* and its behaviour score (recognition: 0/1 correct;
generation: rubric score). A term's series is the mean over its prompts at each revision.
Each revision is finished (and on disk) before the next is loaded, so a crash costs at most
the batch in flight and a rerun loads only the revisions that are not done.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bindscope.batch import GENERATION_BATCH_SIZE, check_batch_size
from bindscope.errors import InputError
from bindscope.experiments import limits
from bindscope.experiments.common import (
    base_record,
    batch_order,
    binding_metrics,
    chunk_items,
    load_revision,
    mean_estimate,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    skipped_reasons,
    summarize_folder,
)
from bindscope.metrics import stats
from bindscope.metrics.behaviour import default_rubric
from bindscope.prompts.context import check_fit
from bindscope.results.records import RecordWriter
from bindscope.results.settings import check_settings, content_sha256
from bindscope.runners.behaviour import generation, recognition
from bindscope.runners.binding import binding

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
    generation_batch_size: int = GENERATION_BATCH_SIZE,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
    heads: bool = False,
    head_options: dict | None = None,
    **load_options,
) -> dict:
    """EB* and behaviour per prompt for each revision of ``model``; then the summary.

    Args:
        model: Hub id or folder.
        revisions: A preset name or the revisions in training order.
        loader: ``loader(model, revision=..., **load_options) -> Model``; default
            ``bindscope.load_model``. The model it returns must carry the revision asked for.
        seed: Seed of the summary's bootstrap intervals, stored in every record.
        heads: Also score every head of each revision (``bindscope.experiments.heads``,
            written to ``OUT/heads``; its summary holds the emergence of each class).
        head_options: ``n_repeated``, ``repeat_length``, ``thresholds``, ``top_k`` for it.
        out: Results folder; records go to ``OUT/<experiment>/records.jsonl``.
        prompts: Prompt set (name, path or ``PromptSet``) of recognition and generation records.
        rubric: Keyword rubric for generation (default: the package rubric).
        batch_size: Texts per forward pass (binding and recognition).
        generation_batch_size: Rows per greedy-generation batch.
        force: Start afresh even where the folder's settings differ (else refused).
        progress: Show a progress bar.
        **load_options: Passed to ``loader`` (dtype, device, remote ...).

    Raises:
        InputError: The loader returned another revision than the one asked for (a revision
            is applied or refused, never only written down).
    """
    from bindscope.loading import load_model

    check_batch_size(batch_size)
    check_batch_size(generation_batch_size, "generation_batch_size", GENERATION_BATCH_SIZE)
    loader = loader or load_model
    revisions = resolve_revisions(revisions)
    pset = prompt_set(prompts)
    rubric = rubric or default_rubric()
    folder = Path(out) / EXPERIMENT
    settings = {"prompt_sha256": pset.sha256, "rubric_sha256": content_sha256(rubric), "seed": seed}
    side = None
    with contextlib.ExitStack() as stack:
        if heads:
            from bindscope.experiments.heads import RevisionScorer

            side = stack.enter_context(
                RevisionScorer(
                    out,
                    pset,
                    seed=seed,
                    force=force,
                    batch_size=batch_size,
                    progress=progress,
                    **(head_options or {}),
                )
            )
        records = folder / "records.jsonl"
        writer = stack.enter_context(RecordWriter(records, force=force, settings=settings))
        for revision in revisions:
            keys = [record_key(EXPERIMENT, model, revision, r.key, "clean") for r in pset]
            if all(k in writer for k in keys) and (side is None or side.done(model, revision)):
                continue
            loaded = load_revision(loader, model, revision, **load_options)
            check_settings(folder, settings, models=[loaded])
            info = {"settings": settings, "sweep": {"revisions": revisions}}
            prov = provenance(loaded, prompt_set=pset, seed=seed, **info)
            sizes = (batch_size, generation_batch_size)
            _run_revision(loaded, pset, writer, rubric, sizes, progress, prov)
            if side is not None:
                side.score(loaded, revisions)
            del loaded
    if side is not None:
        side.close()
    return summarize(folder)


def _run_revision(model, pset, writer, rubric, sizes, progress, prov) -> None:
    batch_size, generation_batch_size = sizes
    check_fit(model, pset)

    def work(chunk):
        bound = binding(model, chunk, batch_size=batch_size, on_missing="skip")
        scores: dict[str, float] = {}
        rec = [r for r in chunk if r.task == "recognition"]
        gen = [r for r in chunk if r.task == "generation"]
        for r, res in zip(rec, recognition(model, rec, batch_size=batch_size) if rec else []):
            scores[r.key] = float(res.correct)
        if gen:
            generated = generation(model, gen, rubric=rubric, batch_size=generation_batch_size)
            for r, out in zip(gen, generated):
                scores[r.key] = out.score
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
        batch_order(model, pset.records),
        writer=writer,
        key=lambda r: record_key(EXPERIMENT, model.name, model.revision, r.key, "clean"),
        work=work,
        chunk_size=chunk_items(batch_size, generation_batch_size, batch_size * 4),
        desc=f"sweep {model.name}@{model.revision}",
        progress=progress,
    )


def summarize_sweep(
    records: list[dict], *, seed: int | None = None, split: int | None = None
) -> dict:
    """Per model: per-revision means with CIs over terms, lead-lag and decoupling.

    ``seed`` defaults to the one the records were made with.
    """
    models: dict[str, dict] = {}
    by_model: dict[str, list[dict]] = {}
    for r in records:
        if r["experiment"] == EXPERIMENT:
            by_model.setdefault(r["model"], []).append(r)
    found: list[dict] = []
    for name, group in by_model.items():
        used = (group[0]["provenance"].get("seed") or 0) if seed is None else seed
        models[name] = _summarize_model(group, checkpoint_order(group), used, split)
        found += sweep_limits(name, group, models[name])
    return {"experiment": EXPERIMENT, "models": models, "limits": found}


def sweep_limits(name: str, group: list[dict], entry: dict) -> list[dict]:
    """What one model's sweep cannot say, as ``limits`` entries.

    Prompts and terms left out, tests that cannot run or cannot reject, and the last
    checkpoint's behaviour at the floor or the ceiling.
    """
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


def _step_key(revision: str) -> tuple[int, ...] | None:
    """The numbers in a revision name, in order (``step1000-tokens4B`` -> (1000, 4))."""
    numbers = re.findall(r"\d+", revision)
    return tuple(int(n) for n in numbers) if numbers else None


def checkpoint_order(records: list[dict]) -> list[str]:
    """Every revision present in the records, in training order.

    Revision names that carry their step (Pythia ``step15000``, OLMo ``step1000-tokens4B``,
    CRFM ``checkpoint-5000``) are ordered by those numbers, never as strings (``step15000``
    before ``step143000``). Otherwise the order the runs declared is kept, each resumed run's
    new revisions after the earlier ones.
    """
    present = {r["revision"] for r in records}
    keys = {v: _step_key(v or "") for v in present}
    if all(k is not None for k in keys.values()):
        return sorted(present, key=lambda v: (keys[v], v))
    declared: list[str] = []
    for r in records:
        for v in r["provenance"].get("sweep", {}).get("revisions") or []:
            if v in present and v not in declared:
                declared.append(v)
    return declared + sorted(present - set(declared), key=str)


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


def leadlag(series: dict[str, dict], *, seed: int = 0) -> dict:
    """C1-B: per term, does EB* lead behaviour (forward lag-1 correlation above backward)?

    Pearson and Spearman are both reported. A term enters a method's count only where its
    lead difference is defined; the others are listed in ``excluded`` with the reason, so the
    "k of n terms lead" fraction and the binomial test share one ``n``.
    """
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


def summarize(folder: str | Path) -> dict:
    """Rebuild ``folder/summary.json`` from ``folder/records.jsonl``."""
    return summarize_folder(folder, summarize_sweep)


__all__ = ["CRFM_SEEDS", "PRESETS", "decoupling", "leadlag", "resolve_revisions", "run"]
