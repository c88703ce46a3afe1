"""Head scan: ablate every head (or layer) alone and measure what behaviour loses.

Method. Each condition zero- or mean-ablates one head (``unit="head"``) or every head of
one layer (``unit="layer"``). A recognition item scores the correct choice's mean
log-probability per token and whether the arg-max choice is correct; a prompt with a
``target`` field scores the target's mean log-probability. The effect of a condition is
the paired drop ``clean - ablated`` per prompt; its mean gets a paired bootstrap 95% CI
and a sign-flip permutation p-value, adjusted across all conditions (Benjamini-Hochberg,
or Holm). With ``unit="head"`` the scan also measures each head's mean BSI on the same
prompts and reports the Spearman correlation of the BSI map with the effect map, with a
bootstrap CI over prompts: does binding predict importance head by head?

All conditions of a prompt share one clean pass (`bindscope.runners.scan`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from bindscope.errors import InputError
from bindscope.experiments import head_stats, scan_attribution
from bindscope.experiments.common import (
    as_pairs,
    base_record,
    binding_metrics,
    check_limit,
    model_label,
    prompt_set,
    provenance,
    record_key,
    run_chunks,
    summarize_tests,
)
from bindscope.experiments.scan_summary import (
    BSI,
    EXPERIMENT,
    METRICS,
    matched_comparison,
    summarize_scan,
)
from bindscope.interventions import head_means
from bindscope.results.records import RecordWriter
from bindscope.runners.binding import binding
from bindscope.runners.scan import ScoredSequence, condition_scores

ABLATIONS = ("zero", "mean", "resample")
CLASSES_FILE = "classes.json"  # per model label: [L][H] primary taxonomy class


def conditions_of(model, unit: str) -> dict[str, list[list[int]]]:
    """Condition name -> ablated heads: ``L3.H5`` per head, or ``L3`` per layer."""
    if unit == "head":
        layers, heads = range(model.n_layers), range(model.n_heads)
        return {f"L{layer}.H{h}": [[layer, h]] for layer in layers for h in heads}
    if unit == "layer":
        return {f"L{l}": [[l, h] for h in range(model.n_heads)] for l in range(model.n_layers)}  # noqa: E741
    raise InputError(f"unit must be 'head' or 'layer', not {unit!r}")


def scored(model, record) -> tuple[list[ScoredSequence], int | None]:
    """The sequences a record is scored on, and the index of the correct one (or None)."""
    prompt = model.tokenize(record.template)
    if record.task == "recognition":
        tok = model.tokenizer
        seqs = [
            ScoredSequence(prompt + tok(" " + c, add_special_tokens=False)["input_ids"],
                           len(tok(" " + c, add_special_tokens=False)["input_ids"]))
            for c in record.choices
        ]  # fmt: skip
        return seqs, record.answer_idx
    target = record.extra.get("target")
    ids = model.tokenizer(target, add_special_tokens=False)["input_ids"]
    return [ScoredSequence(prompt + ids, len(ids))], None


def scannable(pset) -> list:
    """Recognition records and records with a ``target`` (text appended after the prompt)."""
    return [r for r in pset.records if r.task == "recognition" or r.extra.get("target")]


def spread_over_terms(items: list, n: int | None) -> list:
    """``n`` items taken in turn from each term (first of each term, then second, ...).

    Terms in order of first appearance; the items keep their file order within a term.
    """
    by_term: dict[str, list] = {}
    for item in items:
        by_term.setdefault(item.term, []).append(item)
    rounds = max((len(group) for group in by_term.values()), default=0)
    order = [group[i] for i in range(rounds) for group in by_term.values() if i < len(group)]
    return order[:n]


#: Why a prompt of the set is not scanned (counted in the summary's limits).
UNSCORED = "generation item without a 'target' to score"


def run(
    models,
    *,
    prompts="canonical",
    out: str | Path,
    ablation: str = "zero",
    unit: str = "head",
    correction: str = "bh",
    seed: int = 0,
    limit: int | None = None,
    spread: bool = False,
    batch_size: int = 16,
    n_resamples: int | None = None,
    matched_classes: int = 0,
    k: int | None = None,
    method: str = "exact",
    verify: int | None = None,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Scan every head (or layer) of each model; write records and a summary.

    Args:
        models: One ``Model`` or a list.
        prompts: Prompt set: recognition items and any records with a ``target`` field.
        ablation: ``zero``, ``mean`` (means over the scanned prompts) or ``resample``: each
            prompt's heads take the outputs of another scanned prompt, drawn with ``seed``
            (recorded as ``donor`` in the metrics), aligned from the end.
        unit: ``head`` (one condition per head) or ``layer`` (one per layer).
        correction: ``bh`` (Benjamini-Hochberg) or ``holm``, across conditions.
        seed: Seed of the bootstrap and permutation tests.
        limit: Scan only ``limit`` scannable prompts (recognition items and prompts with a
            ``target``; quick looks): the first in file order, or with ``spread`` taken in
            turn from each term (one per term, then a second per term, ...).
        spread: With ``limit``, spread the prompts evenly over the terms (recorded);
            refused without ``limit``.
        batch_size: Sequences per clean pass.
        n_resamples: Bootstrap and permutation resamples per condition (default: enough
            for one head alone to pass the correction, and at least 9999).
        matched_classes: With ``unit="head"``, compare the EB* top-``k`` heads' mean effect
            with this many random head sets matched to their taxonomy classes (sink,
            previous-token, induction, duplicate-token; ``bindscope.metrics.heads``), so
            "binding heads matter" is told apart from "sink heads matter". 0: off.
        k: Size of the EB* top set compared under ``matched_classes`` (default 4); refused
            without it, where it would change nothing.
        method: ``exact`` (every condition ablated) or ``attribution``: every head's effect
            estimated by attribution patching, then only the ``verify`` heads with the
            largest estimates scanned exactly (`bindscope.experiments.scan_attribution`).
        verify: Heads verified exactly under ``attribution`` (default 20).
        out: Results folder; records go to ``OUT/<experiment>/records.jsonl``.
        force: Start afresh even where the folder's settings differ (else refused).
        progress: Show a progress bar.
    """
    if ablation not in ABLATIONS:
        raise InputError(f"ablation must be one of {', '.join(ABLATIONS)}, not {ablation!r}")
    if correction not in head_stats.CORRECTIONS:
        raise InputError(f"correction must be 'bh' or 'holm', not {correction!r}")
    check_limit(limit)
    if matched_classes and unit != "head":
        raise InputError("--matched-classes compares heads: it needs --unit head")
    if k is not None and not matched_classes:
        raise InputError(
            f"k={k} applies only with matched_classes (it sizes the EB* top set compared "
            "with class-matched head sets); leave it out or pass matched_classes=N"
        )
    verify = scan_attribution.check_options(method, verify, unit)
    models = models if isinstance(models, (list, tuple)) else [models]
    pset = prompt_set(prompts)
    if spread and limit is None:
        raise InputError(
            "spread=True (--spread) spreads --limit prompts over the terms: add --limit N"
        )
    items = spread_over_terms(scannable(pset), limit) if spread else scannable(pset)[:limit]
    if not items:
        raise InputError(
            f"{pset.name}: no recognition record and no record with a 'target' field to scan"
        )
    head_stats.check_resamples(n_resamples, len(items))
    folder = Path(out) / EXPERIMENT
    settings = {
        "ablation": ablation,
        "unit": unit,
        "seed": seed,
        "limit": limit,
        "prompt_sha256": pset.sha256,
        "matched_classes": matched_classes,
        "method": method,
    }
    if verify is not None:
        settings["verify"] = verify
    if spread:
        settings["spread"] = True
    if matched_classes:
        settings["k"] = 4 if k is None else k
    records = folder / "records.jsonl"
    with RecordWriter(records, force=force, settings=settings, models=models) as writer:
        for model in models:
            _run_model(model, pset, items, writer, settings, batch_size, progress)
            if matched_classes:
                _write_classes(folder, model, items, seed, batch_size)
    return summarize(folder, correction=correction, n_resamples=n_resamples)


def draw_donors(items, seed: int) -> dict:
    """Each prompt's resample donor: another scanned prompt, drawn reproducibly from ``seed``.

    Raises:
        InputError: Fewer than two prompts (no other prompt to draw from).
    """
    if len(items) < 2:
        raise InputError("--ablation resample needs at least two prompts to draw donors from")
    rng = np.random.default_rng(seed)
    out = {}
    for i, rec in enumerate(items):
        j = int(rng.integers(len(items) - 1))
        out[rec.key] = items[j + (j >= i)]  # any prompt but itself
    return out


def _chunk_sequences(model, chunk, donor_of: dict) -> tuple[list, list[int], list, list]:
    """A chunk's scored sequences, their prompt indices and donors, and each prompt's answer.

    Each prompt is tokenized once here, for the pass and for its records. A donor (resample
    only) is the donor prompt's sequence of the same choice.
    """
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


def _metrics(mine: list[float], answer: int | None, donor) -> dict[str, object]:
    """A record's metrics from its sequences' scores (one per choice, or the target's)."""
    metrics: dict[str, object] = {"logprob": mine[0] if answer is None else mine[answer]}
    if donor is not None:
        metrics["donor"] = donor.key
    if answer is not None:
        prediction = max(range(len(mine)), key=lambda j: (mine[j], -j))
        metrics.update(choice_scores=mine, prediction=prediction, score=int(prediction == answer))
    return metrics


def _run_model(model, pset, items, writer, settings, batch_size, progress) -> None:
    prov = provenance(
        model, prompt_set=pset, seed=settings["seed"], scan=settings,
        n_layers=model.n_layers, n_heads=model.n_heads,
        prompts_skipped={UNSCORED: len(pset.records) - len(scannable(pset))},
    )  # fmt: skip
    conditions = conditions_of(model, settings["unit"])
    names = list(conditions)
    label = model_label(model)
    means = None
    if settings["ablation"] == "mean":
        heads = [h for hs in conditions.values() for h in hs]
        means = head_means(model, [r.template for r in items], heads, batch_size=batch_size)
    donor_of = draw_donors(items, settings["seed"]) if settings["ablation"] == "resample" else {}
    if settings["method"] == "attribution":  # estimate every head, verify the top ones
        chosen = scan_attribution.estimate_heads(
            model, items, writer, settings, prov, means=means, donor_of=donor_of,
            batch_size=batch_size, progress=progress,
        )  # fmt: skip
        names = [name for name in names if name in chosen]

    def key(rec, name):
        return record_key(EXPERIMENT, model.name, model.revision, rec.key, name)

    def work(chunk):
        sequences, owners, donors, answers = _chunk_sequences(model, chunk, donor_of)
        # a remote attribution scan verifies its few heads through Model.logits
        remote = getattr(model, "remote", False) and settings["method"] == "attribution"
        score = scan_attribution.logits_condition_scores if remote else condition_scores
        clean, scores = score(
            model,
            sequences,
            [as_pairs(conditions[n]) for n in names],
            means=means,
            donors=donors or None,
            batch_size=batch_size,
            progress=progress,  # moves after every pass, with an ETA for the chunk
        )
        owner_of = np.array(owners)
        out = []
        for i, rec in enumerate(chunk):
            answer = answers[i]
            columns = np.flatnonzero(owner_of == i)
            for name, values in [("clean", clean), *zip(names, scores)]:
                if key(rec, name) in writer:
                    continue
                mine = [float(v) for v in values[columns]]
                metrics = _metrics(mine, answer, donor_of.get(rec.key))
                heads = conditions.get(name, [])
                out.append(
                    base_record(
                        EXPERIMENT,
                        model,
                        rec,
                        name,
                        metrics,
                        prov,
                        heads=heads,
                        ablation=settings["ablation"],
                        scan=settings,
                    )
                )
        return out

    run_chunks(
        items,
        writer=writer,
        key=lambda rec: key(rec, names[-1]),  # a prompt's last record is written last
        work=work,
        chunk_size=batch_size,
        desc=f"scan {label}",
        progress=progress,
    )
    if settings["unit"] != "head":
        return
    bsi_key = lambda r: record_key(BSI, model.name, model.revision, r.key, "clean")  # noqa: E731

    def bsi_work(chunk):
        results = binding(model, chunk, batch_size=batch_size, on_missing="skip")
        return [
            base_record(BSI, model, rec, "clean", binding_metrics(res, model), prov)
            for rec, res in zip(chunk, results)
        ]

    run_chunks(
        items,
        writer=writer,
        key=bsi_key,
        work=bsi_work,
        chunk_size=batch_size * 4,
        desc=f"scan BSI {label}",
        progress=progress,
    )


def _write_classes(folder: Path, model, items, seed: int, batch_size: int) -> None:
    """Store each head's primary taxonomy class for this model in ``classes.json``."""
    from bindscope.experiments.heads import primary_classes

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
    """Summarise ``folder/records.jsonl`` into ``folder/summary.json``.

    ``correction`` and ``n_resamples`` default to those of the summary already there (so
    ``bindscope summarize`` keeps a run's ``--correction``), else ``bh`` and enough
    resamples for one head alone to pass the correction (at least 9999).
    """
    path = Path(folder) / CLASSES_FILE
    classes = json.loads(path.read_text("utf-8")) if path.is_file() else None
    build = functools.partial(summarize_scan, classes=classes)
    return summarize_tests(folder, build, correction=correction, n_resamples=n_resamples)


__all__ = [
    "BSI",
    "EXPERIMENT",
    "METRICS",
    "conditions_of",
    "draw_donors",
    "matched_comparison",
    "run",
    "spread_over_terms",
    "summarize",
    "summarize_scan",
]
