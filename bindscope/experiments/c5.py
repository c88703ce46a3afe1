"""C5: does ablating the heads that bind terms most hurt behaviour more than random heads?

Top, bottom and each null's k-head sets (``c5_nulls``) are scored on every evaluation
prompt, all conditions of a chunk in the same batches; each null is its own sequence of
sets with its own p (the options say how it stops). The summary is ``c5_summary``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bindscope.batch import GENERATION_BATCH_SIZE, check_batch_size
from bindscope.errors import InputError
from bindscope.experiments.c5_presets import PRESETS
from bindscope.experiments.c5_summary import (
    EXPERIMENT,
    NULLS,
    RANKING,
    summarize_c5,
    text,
    undecided_nulls,
)
from bindscope.experiments.kit.ablation_sets import (
    check_k,
    check_limit,
    draw_random_sets,
)
from bindscope.experiments.kit.binding_reuse import reuse_or_bind, stored_binding
from bindscope.experiments.kit.chunks import batch_order, chunk_items, first_items, prompt_set
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.null_tests import null_sets
from bindscope.experiments.kit.options import (
    GENERATION_HELP,
    Options,
    check_choice,
    check_spread,
    check_whole,
    count,
    option,
    positive,
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

#: How recognition conditions run; see ``run``.
STRATEGIES = ("residual", "batched")
ABLATIONS = ("zero", "mean")
SAMPLINGS = ("sequential", "fixed")


@dataclass(frozen=True)
class C5Options(Options):
    """The options of C5 (``bindscope c5``; ``run(models, *, out, ..., **options)``).

    ``run`` runs C5 for one ``Model`` or a list (each gets its own ranking and conditions)
    and writes records and a summary; ``batch_size`` is texts per forward pass (ranking and
    recognition) and ``seed`` seeds the random sets and the bootstrap.

    Attributes:
        prompts: Evaluation prompt set (recognition and generation records).
        ranking: Prompt set used to rank heads by mean BSI (default: ``prompts``).
        k: Heads per ablated set.
        n_random: Random k-head sets per null: the most under ``sequential`` sampling (199
            lets p reach 1/200 = 0.005, low enough to pass Holm across 3 models), all of
            them under ``fixed``.
        sampling: ``sequential`` (default; Besag and Clifford 1991): each null draws sets in
            order and stops once ``stop_at`` of them drop at least as much as the top set,
            p = stop_at / sets drawn, else goes on to ``n_random``, p = (hits + 1) /
            (n_random + 1). ``fixed``: all ``n_random`` sets, the rank p.
        stop_at: The ``h`` of the sequential rule (exceedances that stop a null).
        ablation: ``zero`` or ``mean`` (means over the ranking set's templates).
        matched_layers: Also draw a layer-matched null: one head in the layer of each top
            head (its own sets and p, beside the unmatched null).
        matched_classes: Also draw a class-matched null: each top head matched by one of
            its 2k nearest heads outside the top set in taxonomy-score space (sink,
            previous-token, induction, duplicate-token; ``ablation_sets.
            draw_score_matched_sets``), so an effect of the top set can be told from an
            effect of, say, previous-token heads; the summary says how close the match is
            and how many heads of each top class lie outside the top set.
        generation_batch_size: Rows per greedy-generation batch (conditions mix in it).
        rubric: Keyword rubric for generation (default: the package rubric).
        strategy: How recognition conditions run (equal to rounding; recorded in
            provenance). ``batched`` (default; a remote model always): conditions mixed in
            batches, each record run in full once per condition with its choices on the
            prompt's cache. ``residual`` (local models): one clean run per batch of
            records, and each ablated condition starts at its set's lowest ablated layer
            from the clean residual stream, in the prompt and in the choices on its cache
            (``bindscope.runners.condition_recognition``). It skips the layers below each
            set (15% of SmolLM2's for random 4-head sets, 3% for its layer-matched null)
            but runs more, smaller passes: 0.8x the speed of ``batched`` there
            (benchmarks/README.md), so it is not the default.
        limit: Only the first N evaluation prompts (``spread``: taken in turn from each
            term), recorded in the settings; they rank the heads too unless ``ranking`` is
            given, as a prompt file cut to them would.
        design: One sentence on how the items were sampled and why, stored with the
            records and shown in the summary and the report.
    """

    prompts: str | Path | PromptSet = prompts_option()
    ranking: str | Path | PromptSet | None = option(
        None, "prompt set that ranks heads (default: prompts)", prompts=True
    )
    k: int = option(4, "heads per ablated set", type=positive)
    n_random: int = option(
        199, "random sets per null (the most under sequential sampling)", type=count
    )
    sampling: str = option(
        "sequential",
        "sequential: stop a null once --stop-at sets drop as much as the top set "
        "(Besag-Clifford); fixed: draw all --n-random",
        choices=SAMPLINGS,
    )
    stop_at: int = option(10, "exceedances that stop a sequential null (its h)", type=positive)
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
        type=positive,
    )
    spread: bool = spread_option()
    generation_batch_size: int = option(GENERATION_BATCH_SIZE, GENERATION_HELP, type=positive)
    rubric: dict | None = setting(None)
    strategy: str = setting("batched")
    design: str | None = setting(None)

    def check(self) -> None:
        """Values and combinations that no model can make right."""
        check_choice("strategy", self.strategy, STRATEGIES)
        check_batch_size(self.generation_batch_size, "generation_batch_size", GENERATION_BATCH_SIZE)
        check_choice("ablation", self.ablation, ABLATIONS)
        check_choice("sampling", self.sampling, SAMPLINGS)
        check_whole(self, {"stop_at": 1, "k": 1, "n_random": 0})
        check_limit(self.limit)
        check_spread(self.limit, self.spread)


def _plan(models: list[LanguageModel], opts: C5Options, common: Common) -> Plan:
    whole = prompt_set(opts.prompts)
    # the whole set keeps its own hash: OUT/binding's results are reused by that hash
    pset = whole
    if opts.limit is not None:
        pset = whole.take(first_items(list(whole.records), opts.limit, opts.spread))
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
    sizes = (common.batch_size, opts.generation_batch_size)

    def strategy(model: LanguageModel) -> str:
        # the residual stream would cross the network
        return "batched" if getattr(model, "remote", False) else opts.strategy

    def prov(model: LanguageModel) -> dict:
        c5_run = {"c5_strategy": strategy(model), "c5_choices": _choice_layout(model)}
        return provenance(model, prompt_set=pset, seed=common.seed, c5=settings, **c5_run)

    study = _Study(opts, common.seed, pset, rset, rubric, sizes, settings)

    def each(run: ModelRun) -> None:
        _run_model(run, study, strategy(run.model))

    return Plan({**settings, **inputs}, each, provenance=prov)


@dataclass(frozen=True)
class _Study:
    """What every model's part of one C5 run shares.

    Attributes:
        opts: The typed options the functions read.
        seed: Seeds the random sets (and the summary's bootstrap).
        pset: The evaluation prompts.
        rset: The ranking prompts.
        rubric: Generation's keyword rubric.
        sizes: Texts per recognition batch, rows per generation batch.
        settings: The options as written with every record: provenance, resume, summary.
    """

    opts: C5Options
    seed: int
    pset: PromptSet
    rset: PromptSet
    rubric: dict
    sizes: tuple[int, int]
    settings: dict


def _choice_layout(model: LanguageModel) -> str:
    """How recognition runs the choices: ``packed``, ``padded`` or ``full``.

    Packed or padded on the prompt's cache (`bindscope.runners.packing`); full sequences on
    a remote model.
    """
    return "full" if getattr(model, "remote", False) else choice_layout(model)


def _run_model(run: ModelRun, study: _Study, strategy: str) -> None:
    """Rank one model's heads, draw its nulls and write every condition's records.

    Sequential sampling evaluates each null's sets in blocks (2h, then h more at a time, up
    to n_random) and stops a null once its rule has decided on every score, so a null draws
    fewer than h sets past its decision; a resumed run reads the
    same decisions from the records, so it continues the same sequence of sets.
    """
    model, opts = run.model, study.opts
    top, bottom = _rank(run, study.rset, opts.k, study.sizes[0])
    conditions: dict[str, list] = {"baseline": [], "top": top, "bottom": bottom}
    on = (True, opts.matched_layers, opts.matched_classes)
    nulls, extra = null_sets(
        model, top, [name for name, wanted in zip(NULLS, on) if wanted],
        k=opts.k, n=opts.n_random, seed=study.seed,
        templates=[r.template for r in study.rset.records], batch_size=study.sizes[0],
    )  # fmt: skip
    means = None
    if opts.ablation == "mean":  # once, for every head any condition may ablate
        every = [top, bottom, *(s for sets in nulls.values() for s in sets)]
        heads = sorted({tuple(h) for hs in every for h in hs})
        templates = [r.template for r in study.rset.records]
        means = head_means(model, templates, heads, batch_size=study.sizes[0])
    open_nulls = set(nulls)
    n, h = opts.n_random, opts.stop_at
    # the p reads the sets in their drawn order: blocks change only how many are evaluated
    for size in [*range(2 * h, n, h), n] if opts.sampling == "sequential" else [n]:
        for null in open_nulls:
            conditions.update({f"{null}:{i:02d}": s for i, s in enumerate(nulls[null][:size])})
        _evaluate(run, study, conditions, means, strategy, extra)
        if opts.sampling != "sequential":
            break
        mine = [
            r
            for r in read_records(run.writer.path)
            if (r["experiment"], r["model"], r["revision"])
            == (EXPERIMENT, model.name, model.revision)
        ]
        open_nulls &= undecided_nulls(mine, study.settings)
        if not open_nulls:
            break


def _rank(
    run: ModelRun, rset: PromptSet, k: int, batch_size: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The top and bottom k heads by mean BSI over the ranking set (written as records)."""
    model = run.model

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
    return rank_heads(mean_bsi(ok), k)


def _evaluate(
    run: ModelRun,
    study: _Study,
    conditions: dict[str, list],
    means: Any,
    strategy: str,
    extra: dict,
) -> None:
    """Every evaluation prompt under every condition, mixed in batches (written as records).

    ``means``: the heads' means under mean ablation (None: zero). ``extra`` is stored with
    the top set's records (the class-matched null's closeness). Records already on disk
    are skipped, so each block of a sequential run evaluates only its new sets.
    """
    model = run.model
    batch_size, generation_batch_size = study.sizes
    items = [(rec, name) for rec in batch_order(model, study.pset.records) for name in conditions]

    def work(chunk: list[tuple[PromptRecord, str]]) -> list[dict]:
        out = []
        for task in ("recognition", "generation"):
            part = [(rec, name) for rec, name in chunk if rec.task == task]
            if part:
                results = _score(model, study, task, part, conditions, means, strategy)
                out += _records(run, study, part, results, conditions, extra)
        return out

    run.chunks(
        items,
        work,
        key=lambda item: run.key(item[0].key, item[1]),
        # about batch_size records with every condition, in whole batches of both kinds
        chunk_size=chunk_items(batch_size, generation_batch_size, batch_size * len(conditions)),
        desc=f"c5 {model_label(model)}",
    )


def _score(
    model: LanguageModel,
    study: _Study,
    task: str,
    part: list[tuple[PromptRecord, str]],
    conditions: dict[str, list],
    means: Any,
    strategy: str,
) -> list[Any]:
    """One task's results of ``(record, condition name)`` pairs, conditions mixed per row.

    The scorers are looked up at call time (not a module-level table), so a test can stand
    in for ``recognition``, ``generation`` or ``recognition_residual``.
    """
    batch_size, generation_batch_size = study.sizes
    ablated = {name for _, name in part} - {"baseline"}
    if task == "recognition" and strategy == "residual" and ablated:
        return recognition_residual(model, part, conditions, means=means, batch_size=batch_size)
    per_row = [_spec(conditions[name], means) for _, name in part]
    records = [rec for rec, _ in part]
    if task == "recognition":
        return recognition(model, records, per_row=per_row, batch_size=batch_size)
    return generation(
        model, records, per_row=per_row, rubric=study.rubric, batch_size=generation_batch_size
    )


def _records(
    run: ModelRun,
    study: _Study,
    part: list[tuple[PromptRecord, str]],
    results: list[Any],
    conditions: dict[str, list],
    extra: dict,
) -> list[dict]:
    """One task's results as records (a recognition one with its answer's margin)."""
    shared: dict[str, Any] = {"ablation": study.opts.ablation, "c5": study.settings}
    out = []
    for (rec, name), res in zip(part, results):
        metrics = res.to_dict()
        metrics.pop("key")
        if rec.task == "recognition":
            metrics["margin"] = _margin(res.scores, rec.answer_idx)
        fields = extra if name == "top" else {}
        out.append(run.record(rec, name, metrics, heads=conditions[name], **shared, **fields))
    return out


def _margin(scores: tuple[float, ...], answer: int | None) -> float | None:
    """The answer's choice score minus the best other choice's (mean log-prob per token)."""
    if answer is None:
        return None
    others = [v for i, v in enumerate(scores) if i != answer]
    return float(scores[answer] - max(others)) if others else None


def _spec(heads: list, means: Any) -> Zero | Mean | None:
    """The intervention of one condition: its heads zeroed, or mean-ablated with ``means``."""
    if not heads:
        return None
    return Zero(heads) if means is None else Mean(heads, means)


def recognition_residual(
    model: LanguageModel,
    part: list[tuple[PromptRecord, str]],
    conditions: dict[str, list],
    *,
    means: Any = None,
    batch_size: int = 16,
) -> list[RecognitionResult]:
    """Recognition results of ``(record, condition name)`` pairs by residual start.

    ``baseline`` comes from each batch's clean run; every other condition starts at its
    set's lowest ablated layer from the clean residual stream, with its choices on the
    prompt's cache (``condition_recognition``), so the layers below it run once per batch.
    """
    records = list({rec.key: rec for rec, _ in part}.values())
    names = sorted({name for _, name in part} - {"baseline"})
    clean, ablated = condition_recognition(
        model, records, [conditions[n] for n in names], means=means, batch_size=batch_size
    )
    table = {"baseline": clean, **dict(zip(names, ablated))}
    row = {rec.key: r for r, rec in enumerate(records)}
    return [table[name][row[rec.key]] for rec, name in part]


def check_complete(folder: Path, records: list[dict]) -> None:
    """Refuse a C5 folder that holds ranking records and no evaluated condition.

    Raises:
        InputError: The run stopped after ranking heads; nothing can be summarized yet.
    """
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


def run(models: Any, options: C5Options | None = None, /, **keywords: Any) -> dict:
    """Run C5: ``run(model, C5Options(k=4), out=...)`` or ``run(model, out=..., k=4)``.

    ``DEFINITION.run`` with the typed options taken as they are; the run's own keywords
    (``out``, ``batch_size``, ``seed``, ``force``, ``progress``) are keywords either way.

    Raises:
        InputError: An option given both in ``options`` and as a keyword.
    """
    if options is None:
        return DEFINITION.run(models, **keywords)
    if not isinstance(options, C5Options):
        raise InputError(f"c5.run takes C5Options as its second argument, not {type(options)}")
    both = sorted(set(keywords) & {f.name for f in fields(C5Options)})
    if both:
        raise InputError(f"{both} given in the C5Options and as keywords; pass each once")
    return DEFINITION.run(models, **options.keywords(), **keywords)


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
