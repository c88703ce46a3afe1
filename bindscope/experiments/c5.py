"""C5: does ablating the heads that bind terms most hurt behaviour more than random heads?"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bindscope.errors import InputError
from bindscope.experiments.c5_presets import PRESETS
from bindscope.experiments.c5_summary import (
    EXPERIMENT,
    NULLS,
    RANKING,
    nulls_of,
    summarize_c5,
    text,
    undecided_nulls,
)
from bindscope.experiments.kit.ablation_sets import check_k, draw_random_sets
from bindscope.experiments.kit.binding_reuse import reuse_or_bind, stored_binding
from bindscope.experiments.kit.chunks import batch_order, chunk_items, first_items, prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan, model_records
from bindscope.experiments.kit.null_tests import null_sets
from bindscope.experiments.kit.options import (
    Options,
    generation_batch_option,
    option,
    prompts_option,
    setting,
    spread_option,
)
from bindscope.experiments.kit.summary import folder_summary
from bindscope.interventions import Mean, Zero, head_means
from bindscope.metrics.behaviour import RecognitionResult, default_rubric
from bindscope.metrics.ranking import mean_bsi, rank_heads
from bindscope.prompts.context import check_fit
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label
from bindscope.results.records import provenance, read_records
from bindscope.results.schema import RecordKind, behaviour_metrics, binding_kind
from bindscope.results.settings import content_sha256
from bindscope.runners.behaviour import generation, recognition
from bindscope.runners.condition_recognition import condition_recognition
from bindscope.runners.packing import choice_layout

STRATEGIES = ("residual", "batched")
ABLATIONS = ("zero", "mean")
SAMPLINGS = ("sequential", "fixed")


@dataclass(frozen=True)
class C5Options(Options):
    """The options of C5 (``bindscope c5``; ``run(models, *, out, ..., **options)``).

    ``strategy`` is ``batched`` or ``residual`` (docs/internals.md; a remote model always
    runs batched); ``design`` is one sentence on how the items were sampled, for the report.
    """

    prompts: str | Path | PromptSet = prompts_option()
    ranking: str | Path | PromptSet | None = option(
        None, "prompt set that ranks heads (default: prompts)", prompts=True
    )
    k: int = option(4, "heads per ablated set", least=1)
    n_random: int = option(
        199, "random sets per null (the most under sequential sampling)", least=0
    )
    sampling: str = option(
        "sequential",
        "sequential: stop a null once --stop-at sets drop as much as the top set "
        "(Besag-Clifford); fixed: draw all --n-random",
        choices=SAMPLINGS,
    )
    stop_at: int = option(10, "exceedances that stop a sequential null (its h)", least=1)
    ablation: str = option(
        "zero",
        "zero the heads' outputs, or set them to their mean over the prompts",
        choices=ABLATIONS,
    )
    matched_layers: bool = option(False, "also a null drawn in the top set's layers", switch=True)
    matched_classes: bool = option(
        False,
        "also a null matched on the heads' taxonomy scores (sink, previous-token, ...)",
        switch=True,
    )
    limit: int | None = option(
        None,
        "only N evaluation prompts (default: all): the first N in the file, or with --spread "
        "taken in turn from each term; they also rank the heads unless --ranking is given",
        least=1,
    )
    spread: bool = spread_option()
    generation_batch_size: int = generation_batch_option()
    rubric: dict | None = setting(None)
    strategy: str = setting("batched", choices=STRATEGIES)
    design: str | None = setting(None)


def _plan(models: list[LanguageModel], opts: C5Options, common: Common) -> Plan:
    pset = prompt_set(opts.prompts)
    # the whole set keeps its own hash: OUT/binding's results are reused by that hash
    if opts.limit is not None:
        pset = pset.take(first_items(list(pset.records), opts.limit, opts.spread))
    rset = prompt_set(opts.ranking) if opts.ranking is not None else pset
    for model in models:
        check_k(model, k=opts.k, matched_classes=opts.matched_classes)
        check_fit(model, [*pset, *(rset if rset is not pset else ())])
    settings = {
        "k": opts.k,
        "n_random": opts.n_random,
        "ablation": opts.ablation,
        "seed": common.seed,
        "matched_layers": opts.matched_layers,
        "ranking_set": rset.name,
        "ranking_sha256": rset.sha256,
    }
    # each only when set: folders written before the option still resume
    if opts.matched_classes:
        settings["matched_classes"] = True
    nulls = [n for n, on in zip(NULLS, (True, opts.matched_layers, opts.matched_classes)) if on]
    if len(nulls) > 1:
        settings["nulls"] = nulls
    if opts.sampling == "sequential":
        settings.update(sampling="sequential", stop_at=opts.stop_at)
    if opts.design:  # likewise
        settings["design"] = opts.design
    if opts.limit is not None:
        settings.update(limit=opts.limit, spread=opts.spread)
    rubric = opts.rubric or default_rubric()
    inputs = {"prompt_sha256": pset.sha256, "rubric_sha256": content_sha256(rubric)}

    def prov(model: LanguageModel) -> dict:
        layout = "full" if getattr(model, "remote", False) else choice_layout(model)
        c5_run = {"c5_strategy": _strategy(model, opts), "c5_choices": layout}
        return provenance(model, prompt_set=pset, seed=common.seed, c5=settings, **c5_run)

    study = _Study(opts, pset, rset, rubric, common.batch_size, settings)
    return Plan({**settings, **inputs}, lambda run: _run_model(run, study), provenance=prov)


def _strategy(model: LanguageModel, opts: C5Options) -> str:
    # the residual stream would cross the network
    return "batched" if getattr(model, "remote", False) else opts.strategy


@dataclass(frozen=True)
class _Study:
    opts: C5Options
    pset: PromptSet
    rset: PromptSet
    rubric: dict
    batch_size: int
    settings: dict
    # one model's run
    heads: dict[str, list] = field(default_factory=dict)  # condition -> its heads
    means: Any = None  # the heads' means under mean ablation (None: zero)
    extra: dict = field(default_factory=dict)  # stored with the top set's records


#: ``(record, condition name)`` pairs of one task.
_Part = list[tuple[PromptRecord, str]]


def _run_model(run: ModelRun, study: _Study) -> None:
    model, opts = run.model, study.opts
    top, bottom = _rank(run, study)
    templates = [r.template for r in study.rset.records]
    nulls, extra = null_sets(
        model, top, nulls_of(study.settings), k=opts.k, n=opts.n_random,
        seed=study.settings["seed"], templates=templates, batch_size=study.batch_size,
    )  # fmt: skip
    means = None
    if opts.ablation == "mean":  # once, for every head any condition may ablate
        every = [top, bottom, *(s for sets in nulls.values() for s in sets)]
        ablated = sorted({tuple(h) for hs in every for h in hs})
        means = head_means(model, templates, ablated, batch_size=study.batch_size)
    heads = {"baseline": [], "top": top, "bottom": bottom}  # the nulls' sets added block by block
    study = replace(study, heads=heads, means=means, extra=extra)
    open_nulls = list(nulls)  # in NULLS order: records come out the same in every process
    n, h = opts.n_random, opts.stop_at
    # the p reads the sets in their drawn order: blocks change only how many are evaluated
    for size in [*range(2 * h, n, h), n] if opts.sampling == "sequential" else [n]:
        for null in open_nulls:
            sets = enumerate(nulls[null][:size])
            heads.update({f"{null}:{i:02d}": s for i, s in sets})
        _evaluate(run, study)
        if opts.sampling != "sequential":
            break
        mine = model_records(run.writer.path, EXPERIMENT, model)
        undecided = undecided_nulls(mine, study.settings)
        open_nulls = [null for null in open_nulls if null in undecided]
        if not open_nulls:
            break


def _rank(run: ModelRun, study: _Study) -> tuple[list[list[int]], list[list[int]]]:
    model, rset, batch_size = run.model, study.rset, study.batch_size

    def rank_key(r: PromptRecord) -> str:
        return run.key(r.key, name=RANKING)

    stored = stored_binding(model, run.writer.path.parents[1], rset)

    def rank_work(chunk: list[PromptRecord]) -> list[dict]:
        recompute = not all(rec.key in stored for rec in chunk)  # reused only as a whole chunk
        found = reuse_or_bind(
            run, chunk, batch_size=batch_size * 2, stored=stored, fresh=lambda rec: recompute
        )
        return [run.record(rec, "clean", m, name=RANKING, prov=prov) for rec, m, prov in found]

    run.chunks(rset.records, rank_work, key=rank_key, chunk_size=batch_size * 8, desc="c5 ranking")
    keys = {rank_key(r) for r in rset.records}
    ranking_records = [r for r in read_records(run.writer.path) if r["key"] in keys]
    ok = [r for r in ranking_records if r["metrics"].get("eb_star") is not None]
    if not ok:
        raise InputError(
            f"{model_label(model)}: no ranking prompt has a 2+ token span; cannot rank heads"
        )
    return rank_heads(mean_bsi(ok), study.opts.k)


def _evaluate(run: ModelRun, study: _Study) -> None:
    model = run.model
    batch_size, generation_batch_size = study.batch_size, study.opts.generation_batch_size
    items = [(rec, name) for rec in batch_order(model, study.pset.records) for name in study.heads]

    def work(chunk: _Part) -> list[dict]:
        out = []
        for task in ("recognition", "generation"):
            part = [(rec, name) for rec, name in chunk if rec.task == task]
            if part:
                out += _records(run, study, part, _score(model, study, part))
        return out

    run.chunks(
        items,
        work,
        key=lambda item: run.key(item[0].key, item[1]),
        # about batch_size records with every condition, in whole batches of both kinds
        chunk_size=chunk_items(batch_size, generation_batch_size, batch_size * len(study.heads)),
        desc=f"c5 {model_label(model)}",
    )


def _score(model: LanguageModel, study: _Study, part: _Part) -> list[Any]:
    batch_size = study.batch_size
    recognizing = part[0][0].task == "recognition"  # one task a part
    ablated = {name for _, name in part} - {"baseline"}
    heads, means = study.heads, study.means
    if recognizing and _strategy(model, study.opts) == "residual" and ablated:
        return recognition_residual(model, part, heads, means=means, batch_size=batch_size)
    per_row = [_spec(heads[name], means) for _, name in part]
    records = [rec for rec, _ in part]
    if recognizing:
        return recognition(model, records, per_row=per_row, batch_size=batch_size)
    size = study.opts.generation_batch_size
    return generation(model, records, per_row=per_row, rubric=study.rubric, batch_size=size)


def _records(run: ModelRun, study: _Study, part: _Part, results: list[Any]) -> list[dict]:
    shared: dict[str, Any] = {"ablation": study.opts.ablation, "c5": study.settings}
    out = []
    for (rec, name), res in zip(part, results):
        metrics = res.to_dict()
        metrics.pop("key")
        if rec.task == "recognition":
            metrics["margin"] = _margin(res.scores, rec.answer_idx)
        fields = study.extra if name == "top" else {}
        out.append(run.record(rec, name, metrics, heads=study.heads[name], **shared, **fields))
    return out


def _margin(scores: tuple[float, ...], answer: int | None) -> float | None:
    if answer is None:
        return None
    others = [v for i, v in enumerate(scores) if i != answer]
    return float(scores[answer] - max(others)) if others else None


def _spec(heads: list, means: Any) -> Zero | Mean | None:
    if not heads:
        return None
    return Zero(heads) if means is None else Mean(heads, means)


def recognition_residual(
    model: LanguageModel,
    part: _Part,
    conditions: dict[str, list],
    *,
    means: Any = None,
    batch_size: int = 16,
) -> list[RecognitionResult]:
    """Recognition results of ``(record, condition name)`` pairs by residual start."""
    records = list({rec.key: rec for rec, _ in part}.values())
    names = sorted({name for _, name in part} - {"baseline"})
    clean, ablated = condition_recognition(
        model, records, [conditions[n] for n in names], means=means, batch_size=batch_size
    )
    table = {"baseline": clean, **dict(zip(names, ablated))}
    row = {rec.key: r for r, rec in enumerate(records)}
    return [table[name][row[rec.key]] for rec, name in part]


def check_complete(folder: Path, records: list[dict]) -> None:
    """Refuse a C5 folder that holds ranking records and no evaluated condition."""
    ranking = sum(r["experiment"] == RANKING for r in records)
    if ranking and not any(r["experiment"] == EXPERIMENT for r in records):
        raise InputError(
            f"{folder / 'records.jsonl'}: holds only {ranking} C5 ranking record(s) and no "
            "evaluated condition (the run stopped after ranking heads); rerun the same "
            f"`bindscope c5 ... --out {folder.parent}` command to finish it"
        )


summarize = folder_summary(EXPERIMENT, summarize_c5, check=check_complete)


CONDITIONS = RecordKind(
    EXPERIMENT, ("baseline", "top", "bottom"), tuple(f"{n}:" for n in NULLS), behaviour_metrics
)
DEFINITION = Experiment(
    EXPERIMENT, "c5", "causal head ablation: top/bottom/random k-head sets", C5Options,
    summarize, text, records=(CONDITIONS, binding_kind(RANKING)), plan=_plan, models="several",
    check_folder=check_complete, presets=PRESETS,
)  # fmt: skip
run = DEFINITION.run

__all__ = [
    "DEFINITION",
    "EXPERIMENT",
    "C5Options",
    "draw_random_sets",
    "run",
    "summarize",
    "summarize_c5",
    "text",
]
