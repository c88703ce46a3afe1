"""C3 few-shot unlockability (``bindscope fewshot``)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.batch import GENERATION_BATCH_SIZE
from bindscope.errors import InputError
from bindscope.experiments.kit import limits
from bindscope.experiments.kit.chunks import prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.options import Options, option, prompts_option, setting
from bindscope.experiments.kit.summary import folder_summary, per_model_view
from bindscope.metrics import stats
from bindscope.metrics.behaviour import default_rubric
from bindscope.prompts.context import check_fit
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet, load_json
from bindscope.protocols import LanguageModel
from bindscope.results.format import estimate, num, pvalue
from bindscope.results.labels import by_model
from bindscope.results.schema import RecordKind, behaviour_metrics
from bindscope.results.settings import content_sha256
from bindscope.runners.behaviour import generation

EXPERIMENT = "fewshot"
CONDITIONS = ("zero_shot", "few_shot", "paraphrase")


def prefixes(exemplars: dict | str | Path | None = None) -> dict[str, dict[str, str]]:
    """Per condition, the text put before each term's stem."""
    if exemplars is None:
        data = load_json("exemplars.json")
    elif isinstance(exemplars, dict):
        data = exemplars
    else:
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


@dataclass(frozen=True)
class FewshotOptions(Options):
    """The options of ``bindscope fewshot``."""

    prompts: str | Path | PromptSet = prompts_option()
    exemplars: dict | str | Path | None = option(None, "exemplars JSON (default: the package's)")
    rubric: dict | None = setting(None)

    def check(self) -> None:
        """A bad exemplars file fails here, before any model loads."""
        prefixes(self.exemplars)


def _plan(models: list[LanguageModel], opts: FewshotOptions, common: Common) -> Plan:
    pset = prompt_set(opts.prompts)
    records = [r for r in pset if r.task == "generation"]
    if not records:
        raise InputError(f"prompt set {pset.name!r} has no generation prompts")
    prefix = prefixes(opts.exemplars)
    rubric = opts.rubric or default_rubric()
    missing = sorted({r.term for r in records} - set(prefix["few_shot"]))
    if missing:
        raise InputError(
            f"no exemplar for term(s) {missing}; add them to the exemplars file "
            '({"terms": {term: {"exemplar": ..., "paraphrase": ...}}})'
        )
    for model, found in itertools.product(models, prefix.values()):
        check_fit(model, records, prefixes=found)
    items = [(r, c) for c in CONDITIONS for r in records]

    def each(run: ModelRun) -> None:
        model, size = run.model, common.batch_size

        def work(chunk: list[tuple[PromptRecord, str]]) -> list[dict]:
            out_records = []
            for condition, pairs in itertools.groupby(chunk, key=lambda item: item[1]):
                part = [r for r, _ in pairs]
                found = prefix.get(condition)
                results = generation(model, part, prefix=found, rubric=rubric, batch_size=size)
                for r, res in zip(part, results):
                    metrics = {k: v for k, v in res.to_dict().items() if k != "key"}
                    out_records.append(run.record(r, condition, metrics))
            return out_records

        run.chunks(
            items,
            work,
            key=lambda item: run.key(item[0].key, item[1]),
            chunk_size=size,  # one generation batch per chunk
            desc=f"fewshot {model.name}",
        )

    settings = {
        "prompt_sha256": pset.sha256,
        "exemplars_sha256": content_sha256(prefix),
        "rubric_sha256": content_sha256(rubric),
        "seed": common.seed,
    }
    return Plan(settings, each, prompt_set=pset)


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


summarize = folder_summary(EXPERIMENT, summarize_fewshot)


def _model_lines(label: str, m: dict) -> Iterator[str]:
    c = m["conditions"]
    yield (
        f"  {label}: zero-shot {num(c.get('zero_shot'))}  few-shot {num(c.get('few_shot'))}"
        f"  paraphrase {num(c.get('paraphrase'))}  (n={m['n']})"
    )
    for cond in ("few_shot", "paraphrase"):
        if cond in m["delta_points"]:
            yield (
                f"    {cond:<11} delta {estimate(m['delta_points'][cond], digits=1)} points, "
                f"paired permutation p {pvalue(m['test'][cond]['p_value'])}"
            )


TITLE = "Few-shot (C3): rubric score; delta in points vs zero-shot, paired bootstrap CI"
DEFINITION = Experiment(
    EXPERIMENT, "fewshot", "C3: zero-shot vs exemplar vs paraphrase prefix", FewshotOptions,
    summarize, per_model_view(TITLE, _model_lines), plan=_plan,
    records=(RecordKind(EXPERIMENT, CONDITIONS, metrics=behaviour_metrics),),
    # every pass here is generation: --batch-size counts generation rows
    batch_size=GENERATION_BATCH_SIZE,
)  # fmt: skip
run = DEFINITION.run

__all__ = ["CONDITIONS", "DEFINITION", "FewshotOptions", "prefixes", "run", "summarize"]
