"""Head scan: ablate every head (or layer) alone and measure what behaviour loses."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bindscope.errors import InputError
from bindscope.experiments.kit import attribution_method, per_head_tests
from bindscope.experiments.kit.ablation_sets import as_pairs, conditions_of
from bindscope.experiments.kit.attribution_method import ESTIMATE, AttributionOptions
from bindscope.experiments.kit.binding_reuse import reuse_or_bind
from bindscope.experiments.kit.chunks import first_items, prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.options import (
    option,
    prompts_option,
    spread_option,
)
from bindscope.experiments.kit.summary import summarize_tests
from bindscope.experiments.kit.taxonomy_plan import primary_classes
from bindscope.experiments.scan_summary import (
    BSI,
    EXPERIMENT,
    METRICS,
    matched_comparison,
    summarize_scan,
)
from bindscope.interventions import Mean, Patch, Resample, Zero, head_means
from bindscope.interventions.flow_specs import Spec
from bindscope.prompts.context import check_fit
from bindscope.prompts.continuations import continuation_ids
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label
from bindscope.results.records import provenance
from bindscope.results.schema import RECOGNITION_METRICS, RecordKind, binding_kind
from bindscope.runners.attribution_patching import TargetLogprob, all_heads
from bindscope.runners.scan import ScoredSequence, condition_scores

ABLATIONS = ("zero", "mean", "resample")
CLASSES_FILE = "classes.json"  # per model label: [L][H] primary taxonomy class


def scannable(pset: PromptSet) -> list[PromptRecord]:
    """Recognition records and records with a ``target`` (text appended after the prompt)."""
    return [r for r in pset.records if r.task == "recognition" or r.extra.get("target")]


#: Why a prompt of the set is not scanned (counted in the summary's limits).
UNSCORED = "generation item without a 'target' to score"


@dataclass(frozen=True)
class ScanOptions(AttributionOptions):
    """The options of the head scan (``bindscope scan``; ``run(models, *, out, ...)``)."""

    prompts: str | Path | PromptSet = prompts_option()
    ablation: str = option(
        "zero",
        "zero each head's output, set it to its mean over the prompts, or take it from "
        "another prompt drawn with --seed",
        choices=ABLATIONS,
    )
    matched_classes: int = option(
        0,
        "compare the EB* top-k heads' effect with N class-matched random head sets "
        "(default %(default)s: off)",
        metavar="N",
        least=0,
    )
    k: int | None = option(
        None,
        "EB* top set size compared under --matched-classes (default 4; refused without it)",
        least=1,
        needs="matched_classes",
    )
    spread: bool = spread_option()

    def check(self) -> None:
        """Options that apply only in some modes are refused elsewhere."""
        super().check()
        if self.matched_classes and self.unit != "head":
            raise InputError("--matched-classes compares heads: it needs --unit head")
        if self.matched_classes and self.method == "attribution":
            raise InputError(
                "--matched-classes needs every head's effect, but --method attribution measures "
                "only the --verify heads; drop --matched-classes or use --method exact"
            )
        if isinstance(self.prompts, PromptSet):  # loaded: the summary's resampling is sized
            per_head_tests.check_resamples(self.n_resamples, len(self.items(self.prompts)))

    def items(self, pset: PromptSet) -> list[PromptRecord]:
        """The prompts scanned: the first ``limit``, or with ``spread`` taken term by term."""
        return first_items(scannable(pset), self.limit, self.spread)


def _plan(models: list[LanguageModel], opts: ScanOptions, common: Common) -> Plan:
    pset = prompt_set(opts.prompts)
    items = opts.items(pset)
    if not items:
        raise InputError(
            f"{pset.name}: no recognition record and no record with a 'target' field to scan"
        )
    per_head_tests.check_resamples(opts.n_resamples, len(items))
    for model in models:  # refused by prompt id before anything is written
        check_fit(model, items, scored=True)
    seed = common.seed
    settings = {
        "ablation": opts.ablation,
        "unit": opts.unit,
        "seed": seed,
        "limit": opts.limit,
        "prompt_sha256": pset.sha256,
        "matched_classes": opts.matched_classes,
    } | opts.method_settings()
    if opts.spread:
        settings["spread"] = True
    if opts.matched_classes:
        settings["k"] = 4 if opts.k is None else opts.k
    unscored = {UNSCORED: len(pset.records) - len(scannable(pset))}

    def prov(model: LanguageModel) -> dict:
        return provenance(
            model, prompt_set=pset, seed=seed, scan=settings, n_layers=model.n_layers,
            n_heads=model.n_heads, prompts_skipped=unscored,
        )  # fmt: skip

    def each(run: ModelRun) -> None:
        _run_model(run, items, settings, common.batch_size)
        if opts.matched_classes:
            _write_classes(run.writer.path.parent, run.model, items, seed, common.batch_size)

    summary = functools.partial(summarize, correction=opts.correction, n_resamples=opts.n_resamples)
    return Plan(settings, each, provenance=prov, summarize=summary)


def draw_donors(items: Sequence[PromptRecord], seed: int) -> dict[str, PromptRecord]:
    """Each prompt's resample donor: another scanned prompt, drawn reproducibly from ``seed``."""
    if len(items) < 2:
        raise InputError("--ablation resample needs at least two prompts to draw donors from")
    rng = np.random.default_rng(seed)
    out = {}
    for i, rec in enumerate(items):
        j = int(rng.integers(len(items) - 1))
        out[rec.key] = items[j + (j >= i)]  # any prompt but itself
    return out


def _chunk_sequences(
    model: LanguageModel, chunk: list[PromptRecord], donor_of: dict[str, PromptRecord]
) -> tuple[list, list[int], list, list]:
    sequences, owners, donors, answers = [], [], [], []
    for i, rec in enumerate(chunk):
        seqs, answer = scored(model, rec)
        answers.append(answer)
        sequences += seqs
        owners += [i] * len(seqs)
        if donor_of:
            theirs, _ = scored(model, donor_of[rec.key])
            donors += [theirs[j % len(theirs)] for j in range(len(seqs))]
    return sequences, owners, donors, answers


def _metrics(
    mine: list[float], answer: int | None, donor: PromptRecord | None
) -> dict[str, object]:
    metrics: dict[str, object] = {"logprob": mine[0] if answer is None else mine[answer]}
    if donor is not None:
        metrics["donor"] = donor.key
    if answer is not None:
        prediction = max(range(len(mine)), key=lambda j: (mine[j], -j))
        metrics.update(choice_scores=mine, prediction=prediction, score=int(prediction == answer))
    return metrics


def scored(model: LanguageModel, record: PromptRecord) -> tuple[list[ScoredSequence], int | None]:
    """The sequences a record is scored on (its choices, or its target), the correct one's index."""
    prompt = model.tokenize(record.template)
    if record.task == "recognition":
        ids = [continuation_ids(model.tokenizer, c) for c in record.choices or ()]
        return [ScoredSequence(prompt + i, len(i)) for i in ids], record.answer_idx
    target = continuation_ids(model.tokenizer, record.extra["target"])
    return [ScoredSequence(prompt + target, len(target))], None


def _spec(model: LanguageModel, settings: dict, means: Any, text: list[int], donor: Any) -> Spec:
    heads = tuple(all_heads(model))
    if settings["ablation"] == "mean":
        return Mean(heads, means)
    if settings["ablation"] == "resample":  # ``Patch`` at equal length, else ``Resample``
        ids = list(donor.ids)
        return Patch(heads, (ids,)) if len(ids) == len(text) else Resample(heads, (ids,))
    return Zero(heads)


def _estimate(
    run: ModelRun, items: list[PromptRecord], settings: dict, means: Any, donor_of: dict, size: int
) -> list[str]:
    model = run.model

    def rows(rec: PromptRecord) -> attribution_method.Row:
        sequences, _, donors, (answer,) = _chunk_sequences(model, [rec], donor_of)
        seq, donor = sequences[answer or 0], donors[answer or 0] if donors else None
        text = list(seq.ids)
        return text, TargetLogprob(seq.n_target), _spec(model, settings, means, text, donor)

    def fields(rec: PromptRecord, value: float, change: np.ndarray) -> dict:
        found = {"logprob": value, "estimate": (-change).tolist()}
        if rec.key in donor_of:
            found["donor"] = donor_of[rec.key].key
        return run.record(
            rec, "estimate", found, name=ESTIMATE, ablation=settings["ablation"], scan=settings
        )

    return attribution_method.estimate_heads(
        run, items, experiment=ESTIMATE, rows=rows, fields=fields, verify=settings["verify"],
        batch_size=size,
    )  # fmt: skip


def _run_model(run: ModelRun, items: list[PromptRecord], settings: dict, batch_size: int) -> None:
    model = run.model
    conditions = conditions_of(model, settings["unit"])
    names = list(conditions)
    means = None
    if settings["ablation"] == "mean":
        heads = [h for hs in conditions.values() for h in hs]
        means = head_means(model, [r.template for r in items], heads, batch_size=batch_size)
    donor_of = draw_donors(items, settings["seed"]) if settings["ablation"] == "resample" else {}
    if settings["method"] == "attribution":  # estimate every head, verify the top ones
        chosen = _estimate(run, items, settings, means, donor_of, batch_size)
        names = [name for name in names if name in chosen]

    def work(chunk: list[PromptRecord]) -> list[dict]:
        sequences, owners, donors, answers = _chunk_sequences(model, chunk, donor_of)
        clean, scores = condition_scores(
            model,
            sequences,
            [as_pairs(conditions[n]) for n in names],
            means=means,
            donors=donors or None,
            batch_size=batch_size,
            progress=run.progress,  # moves after each batch of texts: its passes are one session
        )
        rows = [("clean", clean), *zip(names, scores)]
        return _chunk_records(run, chunk, rows, owners, answers, conditions, donor_of, settings)

    run.chunks(
        items,
        work,
        key=lambda rec: run.key(rec.key, names[-1]),  # a prompt's last record is written last
        chunk_size=batch_size,
        desc=f"scan {model_label(model)}",
    )
    if settings["unit"] == "head":
        _bsi_pass(run, items, batch_size)


def _chunk_records(
    run: ModelRun,
    chunk: list[PromptRecord],
    rows: list[tuple[str, np.ndarray]],
    owners: list[int],
    answers: list,
    conditions: dict[str, list],
    donor_of: dict,
    settings: dict,
) -> list[dict]:
    owner_of = np.array(owners)
    shared: dict[str, Any] = {"ablation": settings["ablation"], "scan": settings}
    out = []
    for i, rec in enumerate(chunk):
        columns = np.flatnonzero(owner_of == i)
        for name, values in rows:
            if run.done(rec.key, name):
                continue
            mine = [float(v) for v in values[columns]]
            metrics = _metrics(mine, answers[i], donor_of.get(rec.key))
            out.append(run.record(rec, name, metrics, heads=conditions.get(name, []), **shared))
    return out


def _bsi_pass(run: ModelRun, items: list[PromptRecord], batch_size: int) -> None:
    def bsi_work(chunk: list[PromptRecord]) -> list[dict]:
        found = reuse_or_bind(run, chunk, batch_size=batch_size)
        return [run.record(rec, "clean", metrics, name=BSI) for rec, metrics, _ in found]

    run.chunks(
        items,
        bsi_work,
        key=lambda r: run.key(r.key, name=BSI),
        chunk_size=batch_size * 4,
        desc=f"scan BSI {model_label(run.model)}",
    )


def _write_classes(
    folder: Path, model: LanguageModel, items: list[PromptRecord], seed: int, batch_size: int
) -> None:
    path = folder / CLASSES_FILE
    found = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    label = model_label(model)
    if label not in found:
        templates = [r.template for r in items]
        found[label] = primary_classes(model, templates, seed=seed, batch_size=batch_size)
        path.write_text(json.dumps(found, indent=1) + "\n", "utf-8")


def summarize(
    folder: str | Path, *, correction: str | None = None, n_resamples: int | None = None
) -> dict:
    """Rebuild ``folder/summary.json``; the test options as in ``summary.summarize_tests``."""
    path = Path(folder) / CLASSES_FILE
    classes = json.loads(path.read_text("utf-8")) if path.is_file() else None
    build = functools.partial(summarize_scan, classes=classes)
    return summarize_tests(
        folder, build, name=EXPERIMENT, correction=correction, n_resamples=n_resamples
    )


def _metrics_of(record: dict) -> tuple[str, ...]:
    return ("logprob",) + (RECOGNITION_METRICS if record["task"] == "recognition" else ())


def _model_lines(label: str, m: dict, top: int) -> list[str]:
    out = [f"  {label}: {m['n_prompts']} prompts"]
    for metric, block in m["metrics"].items():
        n_sig = len(block["significant"])
        out.append(f"    {metric} (clean {block['clean_mean']:.3f}; {n_sig} significant)")
        out += [f"      {per_head_tests.cell_line(c)}" for c in block["top"][:top]]
        out += per_head_tests.agreement_lines(block.get("agreement"))
    corr = m.get("bsi_vs_effect")
    if corr and corr.get("value") is not None:
        out.append(
            f"    BSI vs {corr.get('effect', 'exact')} effect: Spearman "
            f"{corr['value']:.3f} [{corr['low']:.3f}, {corr['high']:.3f}] over "
            f"{corr['n_prompts']} prompts and {corr['n_cells']} heads"
        )
    return out + per_head_tests.matched_lines(m.get("binding_top_vs_matched"))


text = functools.partial(per_head_tests.summary_lines, title="Head scan", model_lines=_model_lines)


CONDITIONS = RecordKind(EXPERIMENT, prefixes=("L",), metrics=_metrics_of)
#: ``--method attribution``: each prompt's estimate of every head (docs/records.md).
ESTIMATES = RecordKind(
    ESTIMATE, conditions=("estimate",), metrics=lambda r: ("logprob", "estimate")
)
DEFINITION = Experiment(
    EXPERIMENT, "scan", "ablate every head alone: effect map with CIs and BH p", ScanOptions,
    summarize, text, records=(CONDITIONS, binding_kind(BSI), ESTIMATES),
    plan=_plan, models="several",
)  # fmt: skip
run = DEFINITION.run

__all__ = [
    "BSI",
    "DEFINITION",
    "EXPERIMENT",
    "METRICS",
    "ScanOptions",
    "draw_donors",
    "matched_comparison",
    "run",
    "summarize",
    "summarize_scan",
]
