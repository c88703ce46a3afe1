"""C3 few-shot unlockability (``bindscope fewshot``).

Every generation prompt is run three ways: as is (``zero_shot``), after the term's exemplar
sentence (``few_shot``), and after a paraphrase of the exemplar that avoids the rubric's
keywords (``paraphrase``). If the few-shot gain comes from copying keywords out of the
exemplar, the paraphrase gains much less. Deltas are paired per prompt, reported in points
(100 x score) with a bootstrap CI and a paired permutation test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bindscope.batch import GENERATION_BATCH_SIZE, check_batch_size
from bindscope.errors import InputError
from bindscope.experiments import limits
from bindscope.experiments.common import (
    base_record,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    summarize_folder,
)
from bindscope.metrics import stats
from bindscope.metrics.behaviour import default_rubric
from bindscope.prompts.context import check_fit
from bindscope.prompts.records import load_json
from bindscope.results.labels import by_model
from bindscope.results.records import RecordWriter
from bindscope.results.settings import content_sha256
from bindscope.runners.behaviour import generation

EXPERIMENT = "fewshot"
CONDITIONS = ("zero_shot", "few_shot", "paraphrase")


def prefixes(exemplars: dict | str | Path | None = None) -> dict[str, dict[str, str]]:
    """Per condition, the text put before each term's stem.

    ``exemplars`` is the package's ``exemplars.json`` by default, or a path to a file of
    the same shape: ``{"terms": {term: {"exemplar": str, "paraphrase": str}}}``.
    """
    if exemplars is None:
        data = load_json("exemplars.json")
    elif isinstance(exemplars, dict):
        data = exemplars
    else:
        import json

        try:
            data = json.loads(Path(exemplars).read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(
                f"{exemplars}: cannot read the exemplars file ({exc}); pass a JSON file shaped "
                '{"terms": {term: {"exemplar": ..., "paraphrase": ...}}}'
            ) from None
    try:
        terms = data.get("terms", data)
        return {
            "few_shot": {t: v["exemplar"].strip() + "\n\n" for t, v in terms.items()},
            "paraphrase": {t: v["paraphrase"].strip() + "\n\n" for t, v in terms.items()},
        }
    except (AttributeError, KeyError, TypeError) as exc:
        raise InputError(
            f"{exemplars or 'exemplars'}: not shaped "
            '{"terms": {term: {"exemplar": str, "paraphrase": str}}} '
            f"({type(exc).__name__}: {exc})"
        ) from None


def run(
    model,
    *,
    prompts="canonical",
    out: str | Path,
    exemplars: dict | str | Path | None = None,
    rubric: dict | None = None,
    batch_size: int = GENERATION_BATCH_SIZE,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Zero-shot, few-shot and paraphrase generation for every generation prompt.

    Every step is greedy generation, so ``batch_size`` is rows per generation batch
    (default ``bindscope.batch.GENERATION_BATCH_SIZE``; ``bindscope fewshot --batch-size``).

    Raises:
        InputError: A term has no exemplar (name it in the exemplars file).
    """
    check_batch_size(batch_size)
    pset = prompt_set(prompts)
    records = [r for r in pset if r.task == "generation"]
    if not records:
        raise InputError(f"prompt set {pset.name!r} has no generation prompts")
    prefix = prefixes(exemplars)
    rubric = rubric or default_rubric()
    missing = sorted({r.term for r in records} - set(prefix["few_shot"]))
    if missing:
        raise InputError(
            f"no exemplar for term(s) {missing}; add them to the exemplars file "
            '({"terms": {term: {"exemplar": ..., "paraphrase": ...}}})'
        )
    for condition in ("few_shot", "paraphrase"):
        check_fit(model, records, prefixes=prefix[condition])
    folder = Path(out) / EXPERIMENT
    settings = {
        "prompt_sha256": pset.sha256,
        "exemplars_sha256": content_sha256(prefix),
        "rubric_sha256": content_sha256(rubric),
        "seed": seed,
    }
    prov = provenance(model, prompt_set=pset, seed=seed, settings=settings)
    items = [(r, c) for c in CONDITIONS for r in records]

    def key(item):
        return record_key(EXPERIMENT, model.name, model.revision, item[0].key, item[1])

    def work(chunk):
        out_records = []
        for condition in CONDITIONS:
            part = [r for r, c in chunk if c == condition]
            if not part:
                continue
            results = generation(
                model, part, prefix=prefix.get(condition), rubric=rubric, batch_size=batch_size
            )
            for r, res in zip(part, results):
                metrics = res.to_dict()
                metrics.pop("key", None)
                out_records.append(base_record(EXPERIMENT, model, r, condition, metrics, prov))
        return out_records

    with RecordWriter(
        folder / "records.jsonl", force=force, settings=settings, models=[model]
    ) as writer:
        run_chunks(
            items,
            writer=writer,
            key=key,
            work=work,
            chunk_size=batch_size,  # one generation batch per chunk
            desc=f"fewshot {model.name}",
            progress=progress,
        )
    return summarize(folder)


def summarize_fewshot(records: list[dict], *, n_resamples: int = 9999) -> dict:
    """Condition means, paired deltas and tests per model, with the summary's limits."""
    models = {}
    found: list[dict | None] = []
    for label, group in by_model(records, EXPERIMENT).items():
        seed = group[0]["provenance"].get("seed") or 0
        table: dict[str, dict[str, float]] = {}
        terms: dict[str, str] = {}
        for r in group:
            table.setdefault(r["condition"], {})[r["prompt_key"]] = r["metrics"]["score"]
            terms[r["prompt_key"]] = r["term"]
        keys = sorted(set.intersection(*(set(v) for v in table.values())))
        scores = {c: np.array([table[c][k] for k in keys]) for c in table}
        entry: dict = {
            "n": len(keys),
            "conditions": {c: float(v.mean()) for c, v in scores.items() if len(v)},
            "delta_points": {},
            "test": {},
            "per_term": {},
        }
        for c in ("few_shot", "paraphrase"):
            if c in scores and "zero_shot" in scores and len(keys) >= 2:
                entry["delta_points"][c] = stats.paired_difference(
                    100 * scores[c], 100 * scores["zero_shot"], seed=seed, n_resamples=n_resamples
                ).to_dict()
                entry["test"][c] = stats.paired_permutation(
                    scores[c], scores["zero_shot"], seed=seed, n_resamples=n_resamples
                ).to_dict()
        for term in sorted({terms[k] for k in keys}):
            idx = [i for i, k in enumerate(keys) if terms[k] == term]
            row = {c: float(v[idx].mean()) for c, v in scores.items()}
            for c in ("few_shot", "paraphrase"):
                if c in row and "zero_shot" in row:
                    row[f"delta_{c}"] = 100 * (row[c] - row["zero_shot"])
            entry["per_term"][term] = row
        models[label] = entry
        found += [
            limits.floor_ceiling(
                label, "zero-shot rubric score", entry["conditions"].get("zero_shot")
            ),
            limits.small_group(label, "the paired prompts", len(keys), "the paired test"),
        ]
    return {"experiment": EXPERIMENT, "models": models, "limits": limits.collect(*found)}


def summarize(folder: str | Path) -> dict:
    """Rebuild ``folder/summary.json`` from ``folder/records.jsonl``."""
    return summarize_folder(folder, summarize_fewshot)


__all__ = ["CONDITIONS", "prefixes", "run", "summarize"]
