"""C5: causal head ablation.

Does ablating the heads that bind terms most hurt behaviour more than ablating random heads?

Heads are ranked by mean BSI over an explicit ranking set that is the same for every
family (default: all canonical prompts). Conditions: baseline, top-k, bottom-k and N random
k-head sets drawn from the heads outside the top set (optionally matched to the top set's
layers), with zero or mean ablation. All conditions of a chunk of prompts run in the same
batches (different heads per row), so 50 random sets stay affordable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bindscope.batch import GENERATION_BATCH_SIZE, check_batch_size
from bindscope.errors import InputError
from bindscope.experiments.c5_summary import EXPERIMENT, summarize_c5
from bindscope.experiments.common import (
    BINDING_FROM,
    base_record,
    batch_order,
    binding_metrics,
    chunk_items,
    model_label,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    stored_binding,
    summarize_folder,
)
from bindscope.interventions import Mean, Zero, head_means
from bindscope.metrics.behaviour import RecognitionResult, default_rubric
from bindscope.metrics.ranking import mean_bsi, rank_heads
from bindscope.prompts.context import check_fit
from bindscope.results.records import RecordWriter, read_records
from bindscope.results.settings import content_sha256
from bindscope.results.summaries import check_complete
from bindscope.runners.behaviour import generation, recognition
from bindscope.runners.binding import binding
from bindscope.runners.scan import ScoredSequence, condition_scores

#: How recognition conditions run; see ``run``.
STRATEGIES = ("residual", "batched")


def draw_random_sets(
    n_layers: int,
    n_heads: int,
    top: list[list[int]],
    *,
    k: int,
    n: int,
    seed: int,
    matched_layers: bool = False,
) -> list[list[list[int]]]:
    """N random k-head sets from the heads outside ``top``, reproducible from ``seed``.

    With ``matched_layers`` each set has one head in the layer of each top head.
    """
    rng = np.random.default_rng(seed)
    excluded = {tuple(h) for h in top}
    pool = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in excluded]  # noqa: E741
    if len(pool) < k:
        raise InputError(
            f"only {len(pool)} heads outside the top set; cannot draw random sets of {k} "
            "(pass a smaller --k)"
        )
    sets = []
    for _ in range(n):
        if matched_layers:
            chosen = []
            for layer, _head in top:
                options = [p for p in pool if p[0] == layer and list(p) not in chosen]
                if not options:
                    raise InputError(
                        f"--matched-layers: layer {layer} has {n_heads} heads, too few to "
                        f"match the top set's {sum(h[0] == layer for h in top)} heads there "
                        "with as many heads outside it; pass a smaller --k or drop "
                        "--matched-layers"
                    )
                chosen.append(list(options[rng.integers(len(options))]))
        else:
            picks = rng.choice(len(pool), size=k, replace=False)
            chosen = [list(pool[i]) for i in picks]
        sets.append(sorted(chosen))
    return sets


def run(
    models,
    *,
    prompts="canonical",
    ranking=None,
    out: str | Path,
    k: int = 4,
    n_random: int = 50,
    ablation: str = "zero",
    matched_layers: bool = False,
    matched_classes: bool = False,
    seed: int = 0,
    rubric: dict | None = None,
    batch_size: int = 16,
    generation_batch_size: int = GENERATION_BATCH_SIZE,
    force: bool = False,
    progress: bool = True,
    strategy: str = "batched",
    design: str | None = None,
) -> dict:
    """Run C5 for one or several models and write records and a summary.

    Args:
        models: One ``Model`` or a list (each gets its own ranking and conditions).
        prompts: Evaluation prompt set (recognition and generation records).
        ranking: Prompt set used to rank heads by mean BSI (default: ``prompts``).
        k: Heads per ablated set.
        n_random: Number of random k-head sets.
        ablation: ``zero`` or ``mean`` (means over the ranking set's templates).
        matched_layers: Random sets use the top set's layers.
        matched_classes: Random sets copy the top set's head classes (sink, previous-token,
            induction, duplicate-token or other; ``bindscope.experiments.heads.
            primary_classes`` on the ranking templates, default thresholds), so an effect of
            the top set can be told from an effect of, say, sink heads.
        seed: Seed of the random sets and of the bootstrap.
        rubric: Keyword rubric for generation (default: the package rubric).
        out: Results folder; records go to ``OUT/<experiment>/records.jsonl``.
        batch_size: Texts per forward pass (ranking and recognition).
        generation_batch_size: Rows per greedy-generation batch (conditions mix in it).
        force: Start afresh even where the folder's settings differ (else refused).
        design: One sentence on how the items were sampled and why, stored with the
            records and shown in the summary and the report.
        strategy: How recognition conditions run (equal to rounding; recorded in
            provenance). ``batched`` (default): conditions mixed in batches, each prompt
            run once per condition with its choices on the prompt's cache. ``residual``
            (local models): one clean pass per batch, and each ablated condition starts at
            its set's lowest ablated layer from the clean residual stream
            (``bindscope.runners.scan``); it runs every choice as its own prompt + choice
            sequence, so it pays off only where choices outnumber the saved layers (on the
            canonical recognition items it runs about 2.4x the token-layers of ``batched``:
            3.3 choices per prompt, and a random 4-head set still runs 82% of 30 layers).
        progress: Show a progress bar.
    """
    if strategy not in STRATEGIES:
        raise InputError(f"strategy={strategy!r}: pass one of {', '.join(STRATEGIES)}")
    check_batch_size(batch_size)
    check_batch_size(generation_batch_size, "generation_batch_size", GENERATION_BATCH_SIZE)
    if ablation not in ("zero", "mean"):
        raise ValueError("ablation must be 'zero' or 'mean'")
    if matched_layers and matched_classes:
        raise ValueError("match random sets on layers or on classes, not both")
    models = models if isinstance(models, (list, tuple)) else [models]
    pset = prompt_set(prompts)
    rset = prompt_set(ranking) if ranking is not None else pset
    for model in models:
        check_k(model, k=k, n_random=n_random)
        check_fit(model, [*pset, *(rset if rset is not pset else ())])
    folder = Path(out) / EXPERIMENT
    settings = {
        "k": k,
        "n_random": n_random,
        "ablation": ablation,
        "seed": seed,
        "matched_layers": matched_layers,
        "ranking_set": rset.name,
        "ranking_sha256": rset.sha256,
    }
    if matched_classes:  # only when set: folders written before the option still resume
        settings["matched_classes"] = True
    if design:  # likewise
        settings["design"] = design
    rubric = rubric or default_rubric()
    inputs = {"prompt_sha256": pset.sha256, "rubric_sha256": content_sha256(rubric)}
    checked = {**settings, **inputs}
    records = folder / "records.jsonl"
    with RecordWriter(records, force=force, settings=checked, models=models) as writer:
        for model in models:
            sizes = (batch_size, generation_batch_size)
            _run_model(model, pset, rset, writer, settings, rubric, sizes, progress, strategy)
    return summarize(folder)


def check_k(model, *, k: int, n_random: int) -> None:
    """Refuse a head-set size the model cannot supply, before any work.

    The top set has k heads and every random set k more from outside it, so 2k heads must
    exist (the bottom set is drawn from all heads).

    Raises:
        InputError: k is not an integer in 1..heads/2, or n_random is negative.
    """
    total = model.n_layers * model.n_heads
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"--k {k!r}: the number of heads per ablated set must be 1 or more")
    if isinstance(n_random, bool) or not isinstance(n_random, int) or n_random < 0:
        raise InputError(f"--n-random {n_random!r}: the number of random sets must be 0 or more")
    if 2 * k > total:
        raise InputError(
            f"--k {k}: {model_label(model)} has {total} heads ({model.n_layers} layers x "
            f"{model.n_heads}), but the top set and each random set drawn outside it need "
            f"{2 * k}; pass --k {total // 2} or less"
        )


def _run_model(model, pset, rset, writer, settings, rubric, sizes, progress, strategy) -> None:
    batch_size, generation_batch_size = sizes
    if getattr(model, "remote", False):
        strategy = "batched"  # the residual stream would cross the network
    prov = provenance(
        model, prompt_set=pset, seed=settings["seed"], c5=settings, c5_strategy=strategy
    )
    rank_key = lambda r: record_key("c5-ranking", model.name, model.revision, r.key, "clean")  # noqa: E731

    stored = stored_binding(model, writer.path.parents[1], rset)
    reused = {**prov, "binding_from": BINDING_FROM}

    def rank_work(chunk):
        if all(rec.key in stored for rec in chunk):  # computed once per folder: reuse
            return [
                base_record("c5-ranking", model, rec, "clean", stored[rec.key], reused)
                for rec in chunk
            ]
        results = binding(model, chunk, batch_size=batch_size * 2, on_missing="skip")
        return [
            base_record("c5-ranking", model, rec, "clean", binding_metrics(res, model), prov)
            for rec, res in zip(chunk, results)
        ]

    run_chunks(
        rset.records,
        writer=writer,
        key=rank_key,
        work=rank_work,
        chunk_size=batch_size * 8,
        desc="c5 ranking",
        progress=progress,
    )
    label = model_label(model)
    keys = {rank_key(r) for r in rset.records}
    ranking_records = [r for r in read_records(writer.path) if r["key"] in keys]
    ok = [r for r in ranking_records if r["metrics"].get("eb_star") is not None]
    if not ok:
        raise ValueError(f"{label}: no ranking prompt has a 2+ token span; cannot rank heads")
    top, bottom = rank_heads(mean_bsi(ok), settings["k"])
    if settings.get("matched_classes"):
        from bindscope.experiments.heads import primary_classes
        from bindscope.metrics.heads import draw_class_matched_sets

        templates = [r.template for r in rset.records]
        primary = primary_classes(model, templates, seed=settings["seed"], batch_size=batch_size)
        randoms = draw_class_matched_sets(
            primary, top, n=settings["n_random"], seed=settings["seed"]
        )
    else:
        randoms = draw_random_sets(
            model.n_layers,
            model.n_heads,
            top,
            k=settings["k"],
            n=settings["n_random"],
            seed=settings["seed"],
            matched_layers=settings["matched_layers"],
        )
    conditions = {"baseline": [], "top": top, "bottom": bottom}
    conditions.update({f"random:{i:02d}": s for i, s in enumerate(randoms)})
    means = None
    if settings["ablation"] == "mean":
        heads = sorted({tuple(h) for hs in conditions.values() for h in hs})
        means = head_means(model, [r.template for r in rset.records], heads, batch_size=batch_size)
    items = [(rec, name) for rec in batch_order(model, pset.records) for name in conditions]
    key = lambda item: record_key(EXPERIMENT, model.name, model.revision, item[0].key, item[1])  # noqa: E731

    task_options = {
        "recognition": {"batch_size": batch_size},
        "generation": {"rubric": rubric, "batch_size": generation_batch_size},
    }

    def work(chunk):
        out = []
        # looked up at call time (not a module-level table), so a test can stand in for either
        scorers: dict[str, Callable[..., list[Any]]] = {"recognition": recognition}
        scorers["generation"] = generation
        for task, score in scorers.items():
            part = [(rec, name) for rec, name in chunk if rec.task == task]
            if not part:
                continue
            options = task_options[task]
            ablated = {name for _, name in part} - {"baseline"}
            if task == "recognition" and strategy == "residual" and ablated:
                results = recognition_residual(
                    model, part, conditions, means=means, batch_size=batch_size
                )
            else:
                results = score(
                    model,
                    [rec for rec, _ in part],
                    per_row=[_spec(conditions[name], means) for _, name in part],
                    **options,
                )
            for (rec, name), res in zip(part, results):
                metrics = res.to_dict()
                metrics.pop("key")
                out.append(
                    base_record(
                        EXPERIMENT,
                        model,
                        rec,
                        name,
                        metrics,
                        prov,
                        heads=conditions[name],
                        ablation=settings["ablation"],
                        c5=settings,
                    )
                )
        return out

    run_chunks(
        items,
        writer=writer,
        key=key,
        work=work,
        # about batch_size records with every condition, in whole batches of both kinds
        chunk_size=chunk_items(batch_size, generation_batch_size, batch_size * len(conditions)),
        desc=f"c5 {label}",
        progress=progress,
    )


def _spec(heads, means):
    """The intervention of one condition: its heads zeroed, or mean-ablated with ``means``."""
    if not heads:
        return None
    return Zero(heads) if means is None else Mean(heads, means)


def recognition_residual(model, part, conditions, *, means=None, batch_size: int = 16):
    """Recognition results of ``(record, condition name)`` pairs by residual start.

    Every choice of a record is the sequence prompt + " choice", scored by its mean
    log-probability per choice token (as ``recognition`` scores it); ``baseline`` comes from
    the clean pass, every other condition starts at its lowest ablated layer from the clean
    run's residual stream (``condition_scores``), so layers below it run once per batch.
    """
    records = list({rec.key: rec for rec, _ in part}.values())
    names = sorted({name for _, name in part} - {"baseline"})
    sequences, owner = [], []
    for r, rec in enumerate(records):
        prompt = model.tokenize(rec.template)
        for choice in rec.choices or ():
            ids = model.tokenizer(" " + choice, add_special_tokens=False)["input_ids"]
            sequences.append(ScoredSequence((*prompt, *ids), len(ids)))
            owner.append(r)
    clean, scores = condition_scores(
        model, sequences, [conditions[n] for n in names], means=means, batch_size=batch_size
    )
    table = {"baseline": clean, **{n: scores[c] for c, n in enumerate(names)}}
    row = {rec.key: r for r, rec in enumerate(records)}
    out = []
    for rec, name in part:
        values = [float(v) for v, o in zip(table[name], owner) if o == row[rec.key]]
        prediction = max(range(len(values)), key=lambda i: (values[i], -i))
        out.append(
            RecognitionResult(rec.key, tuple(values), prediction, int(prediction == rec.answer_idx))
        )
    return out


def summarize(folder: str | Path) -> dict:
    """Rebuild ``folder/summary.json`` from ``folder/records.jsonl`` (a finished run only)."""
    return summarize_folder(folder, summarize_c5, check=check_complete)


__all__ = ["EXPERIMENT", "draw_random_sets", "run", "summarize", "summarize_c5"]
