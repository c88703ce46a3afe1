"""Per-head activation patching: which heads carry the clean prompt's answer?

Method. Each pair holds a clean and a corrupted prompt that tokenize to the same length and
a metric: the mean log-probability of a ``target`` text appended to both, or the logit
difference ``clean_answer - corrupted_answer`` (one token each) at the last position. Every
head's output (or every layer's, ``unit="layer"``) is patched from the clean run into the
corrupted run (``Patch``), and the normalised recovery
``(patched - corrupted) / (clean - corrupted)`` is recorded per pair. Per head: the mean
recovery with a paired bootstrap 95% CI and a sign-flip permutation p-value (recovery
against 0), adjusted across heads (Benjamini-Hochberg, or Holm). Pairs whose clean and
corrupted metrics are equal have no recovery to measure and are left out of the summary.

Pair files are JSON Lines (``docs/records.md``, "Pair files"); the built-in ``pairs`` set
replaces the term of each canonical recognition item with a control term.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.errors import InputError, PromptFileError
from bindscope.experiments import head_stats, limits
from bindscope.experiments.common import (
    as_pairs,
    check_limit,
    model_label,
    provenance,
    record_key,
    run_chunks,
    summarize_tests,
)
from bindscope.experiments.scan import conditions_of
from bindscope.interventions import Patch
from bindscope.prompts.datafiles import data_path
from bindscope.results.labels import by_model
from bindscope.results.records import RecordWriter
from bindscope.results.settings import content_sha256

EXPERIMENT = "patching"


@dataclass(frozen=True)
class Pair:
    """One clean/corrupted pair (see ``docs/records.md``, "Pair files")."""

    pair_id: str
    term: str  # "" when the pair has none (an IOI pair); only labels the records
    clean: str
    corrupted: str
    target: str | None = None
    clean_answer: str | None = None
    corrupted_answer: str | None = None
    control_group: str | None = None

    @property
    def key(self) -> str:
        """``term/pair_id`` (``pair_id`` without a term), unique in a pair file."""
        return f"{self.term}/{self.pair_id}" if self.term else self.pair_id


def load_pairs(path_or_name: str | Path = "pairs") -> tuple[list[Pair], str, str]:
    """Read a pair file (``pairs`` is the built-in set); returns pairs, name and SHA-256.

    Raises:
        PromptFileError: A line is not JSON or lacks a field (file and line named).
    """
    path = data_path("pairs.jsonl") if str(path_or_name) == "pairs" else Path(path_or_name)
    if not path.is_file():
        raise PromptFileError(f"{path}: no such pair file; pass 'pairs' or a .jsonl path")
    pairs, seen = [], set()
    for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: not valid JSON ({exc.msg})") from None
        missing = [k for k in ("pair_id", "clean", "corrupted") if k not in row]
        if missing:
            raise PromptFileError(f"{where}: missing field(s) {missing}")
        has_answers = "clean_answer" in row and "corrupted_answer" in row
        if not row.get("target") and not has_answers:
            raise PromptFileError(
                f"{where}: give a 'target' text, or both 'clean_answer' and 'corrupted_answer'"
            )
        if row.get("target") and ("clean_answer" in row or "corrupted_answer" in row):
            raise PromptFileError(
                f"{where}: both 'target' and 'clean_answer'/'corrupted_answer'; a pair has one "
                "metric: keep 'target' (its mean log-prob) or the two answers (their logit "
                "difference)"
            )
        pair = Pair(
            str(row["pair_id"]),
            str(row.get("term") or ""),
            row["clean"],
            row["corrupted"],
            row.get("target"),
            row.get("clean_answer"),
            row.get("corrupted_answer"),
            row.get("control_group"),
        )
        if pair.key in seen:
            raise PromptFileError(f"{where}: pair {pair.key} appears twice")
        seen.add(pair.key)
        pairs.append(pair)
    if not pairs:
        raise PromptFileError(f"{path}: no pairs (the file holds no JSON line); docs/records.md")
    return pairs, path.stem, content_sha256(path)


def _texts_and_metric(model, pair: Pair):
    """The two texts as run, and a function of a text's logits ``[n, V]`` giving the metric."""
    tok = model.tokenizer
    if pair.clean_answer is not None and pair.corrupted_answer is not None:
        ids = [tok(a, add_special_tokens=False)["input_ids"] for a in
               (pair.clean_answer, pair.corrupted_answer)]  # fmt: skip
        if any(len(i) != 1 for i in ids):
            raise InputError(
                f"pair {pair.key}: clean_answer and corrupted_answer must be one token each "
                f"under {model.name}'s tokenizer (got {[len(i) for i in ids]})"
            )

        def logit_difference(logits):
            return float(logits[-1, ids[0][0]] - logits[-1, ids[1][0]])

        return pair.clean, pair.corrupted, logit_difference
    target = tok(pair.target, add_special_tokens=False)["input_ids"]
    clean = model.tokenize(pair.clean) + target
    corrupted = model.tokenize(pair.corrupted) + target

    def metric(logits):
        logp = logits.float().log_softmax(-1)
        n = logits.shape[0]
        return float(np.mean([float(logp[p - 1, clean[p]]) for p in range(n - len(target), n)]))

    return clean, corrupted, metric


def run(
    model,
    *,
    pairs="pairs",
    out: str | Path,
    unit: str = "head",
    correction: str = "bh",
    seed: int = 0,
    limit: int | None = None,
    batch_size: int = 16,
    n_resamples: int | None = None,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Patch every head (or layer) from clean into corrupted runs; write records, summary.

    Args:
        model: A ``Model``.
        pairs: ``pairs`` (built-in) or a pair file path.
        unit: ``head``, ``layer``, or ``position``: every head of one layer patched at one
            token position, counted from the end (``L3.P0`` is layer 3 at the last token), over
            the positions every pair has.
        correction: ``bh`` or ``holm``, across conditions.
        limit: Only the first ``limit`` pairs that fit the model's tokenizer.
        out: Results folder; records go to ``OUT/<experiment>/records.jsonl``.
        batch_size: Texts per forward pass.
        force: Start afresh even where the folder's settings differ (else refused).
        progress: Show a progress bar.
        n_resamples: Bootstrap and permutation resamples per condition (default: enough
            for one head alone to pass the correction, and at least 9999).
        seed: Seed of the bootstrap and permutation tests.
    """
    if correction not in head_stats.CORRECTIONS:
        raise InputError(f"correction must be 'bh' or 'holm', not {correction!r}")
    check_limit(limit)
    found, name, sha = load_pairs(pairs)
    head_stats.check_resamples(n_resamples, len(found[:limit]))
    prepared = []
    skipped = 0
    for pair in found:
        clean, corrupted, metric = _texts_and_metric(model, pair)
        lengths = [len(t) if not isinstance(t, str) else len(model.tokenize(t)) for t in
                   (clean, corrupted)]  # fmt: skip
        if lengths[0] != lengths[1]:
            skipped += 1  # another tokenizer than the one the pairs were matched under
            continue
        prepared.append((pair, clean, corrupted, metric))
    prepared = prepared[:limit]
    if not prepared:
        raise InputError(f"{name}: no pair tokenizes to equal lengths under {model.name}")
    folder = Path(out) / EXPERIMENT
    settings = {"unit": unit, "seed": seed, "limit": limit, "pairs": name, "pairs_sha256": sha}
    shortest = min(_length(model, corrupted) for _, _, corrupted, _ in prepared)
    conditions, offsets = _conditions(model, unit, shortest)
    names = list(conditions)
    prov = provenance(
        model, seed=seed, patching=settings, n_layers=model.n_layers, n_heads=model.n_heads,
        pairs_skipped=skipped,
    )  # fmt: skip
    prov.update(prompt_set=name, prompt_sha256=sha)

    def key(pair, condition):
        return record_key(EXPERIMENT, model.name, model.revision, pair.key, condition)

    def work(chunk):
        out = []
        for pair, clean, corrupted, metric in chunk:
            base = model.logits([clean, corrupted], batch_size=batch_size)
            values = {"clean": metric(base[0]), "corrupted": metric(base[1])}
            last = _length(model, corrupted) - 1
            patched = model.logits(
                [corrupted] * len(names),
                per_row=[
                    Patch(
                        as_pairs(conditions[n]),
                        source=(clean,),
                        positions=_where(offsets, n, last),
                    )
                    for n in names
                ],
                batch_size=batch_size,
            )
            rows: list[tuple[str, list, float]] = [("clean", [], values["clean"])]
            rows += [(n, conditions[n], metric(p)) for n, p in zip(names, patched)]
            for condition, heads, value in rows:
                if key(pair, condition) in writer:
                    continue
                metrics = {**values, "patched": value}
                if condition in offsets:
                    metrics["position_from_end"] = offsets[condition]
                out.append(_record(model, pair, condition, heads, metrics, prov, settings))
        return out

    records = folder / "records.jsonl"
    with RecordWriter(records, force=force, settings=settings, models=[model]) as writer:
        run_chunks(
            prepared,
            writer=writer,
            key=lambda item: key(item[0], names[-1]),
            work=work,
            chunk_size=max(1, batch_size // 4),
            desc=f"patching {model_label(model)}",
            progress=progress,
        )
    return summarize(folder, correction=correction, n_resamples=n_resamples)


def _length(model, text) -> int:
    """Tokens of a text as run (token-id lists are already tokens)."""
    return len(text) if not isinstance(text, str) else len(model.tokenize(text))


def _conditions(model, unit: str, shortest: int) -> tuple[dict, dict[str, int]]:
    """Condition -> patched heads, and (``unit="position"``) condition -> offset from the end.

    Offsets run over the positions every pair has: ``0 .. shortest - 1``.
    """
    if unit != "position":
        return conditions_of(model, unit), {}
    layers = conditions_of(model, "layer")
    conditions, offsets = {}, {}
    for name, heads in layers.items():
        for offset in range(shortest):
            conditions[f"{name}.P{offset}"] = heads
            offsets[f"{name}.P{offset}"] = offset
    return conditions, offsets


def _where(offsets: dict[str, int], name: str, last: int) -> tuple[int, ...] | None:
    """The patched token position of a condition (None: every position)."""
    return (last - offsets[name],) if name in offsets else None


def _record(model, pair, condition, heads, metrics, prov, settings) -> dict:
    return {
        "experiment": EXPERIMENT,
        "key": record_key(EXPERIMENT, model.name, model.revision, pair.key, condition),
        "model": model.name,
        "revision": model.revision,
        "family": model.family,
        "prompt_key": pair.key,
        "prompt_id": pair.pair_id,
        "term": pair.term,
        "task": "recognition" if pair.target is not None else "generation",
        "control_group": pair.control_group,
        "condition": condition,
        "heads": [list(h) for h in heads],
        "ablation": "patch" if heads else None,
        "metrics": metrics,
        "provenance": prov,
        "patching": settings,
    }


def summarize_patching(
    records: list[dict], *, correction: str = "bh", n_resamples: int | None = None, top: int = 10
) -> dict:
    """Recovery maps with CIs and adjusted p per model, and the top conditions.

    ``n_resamples`` defaults per model as in ``summarize_scan``; each entry holds the number
    used.
    """
    evaluated = [r for r in records if r["experiment"] == EXPERIMENT]
    if not evaluated:
        return {"experiment": EXPERIMENT, "models": {}}
    settings = evaluated[0]["patching"]
    groups = by_model(evaluated)
    models = {}
    found: list[dict] = []
    for label, group in groups.items():
        first = group[0]
        n_layers, n_heads = first["provenance"]["n_layers"], first["provenance"]["n_heads"]
        positions = [r["metrics"].get("position_from_end") for r in group]
        width = {
            "head": n_heads,
            "layer": 1,
            "position": 1 + max((p for p in positions if p is not None), default=0),
        }[settings["unit"]]
        table: dict[str, dict[str, float]] = {}
        heads: dict[str, list] = {}
        ends: dict[str, tuple[float, float]] = {}
        unusable: dict[str, list[str]] = {}  # pair -> keys of its records with a bad number
        for r in group:
            m = r["metrics"]
            ends[r["prompt_key"]] = (m["clean"], m["corrupted"])
            if not all(head_stats.finite(m.get(f)) for f in ("clean", "corrupted", "patched")):
                unusable.setdefault(r["prompt_key"], []).append(r["key"])
            if r["condition"] == "clean":
                continue
            h = r["heads"]
            column = m.get("position_from_end", 0)  # position unit: the map's columns
            heads[r["condition"]] = h[0] if len(h) == 1 else [h[0][0], column]
            table.setdefault(r["condition"], {})[r["prompt_key"]] = m["patched"]
        names = sorted(table, key=lambda n: heads[n])
        usable = sorted(
            p
            for p, (c, x) in ends.items()
            if p not in unusable and c != x and all(p in table[n] for n in names)
        )
        no_gap = len(ends) - len(unusable) - len(usable)
        used = n_resamples or head_stats.default_resamples(len(names))
        cells = {}
        for name in names:
            recovery = np.array(
                [(table[name][p] - ends[p][1]) / (ends[p][0] - ends[p][1]) for p in usable]
            )
            cells[name] = head_stats.cell_stats(
                recovery,
                np.zeros_like(recovery),
                seed=settings["seed"],
                n_resamples=used,
                alternative="two-sided",
            )
        head_stats.adjust(cells, correction=correction)
        gap = [ends[p][0] - ends[p][1] for p in usable]
        models[label] = {
            "model": first["model"],
            "revision": first["revision"],
            "n_layers": n_layers,
            "n_heads": n_heads,
            "n_resamples": used,
            "n_pairs": len(usable),
            "n_pairs_no_gap": no_gap,
            "pairs_skipped": first["provenance"].get("pairs_skipped", 0),
            "mean_gap": float(np.mean(gap)) if gap else math.nan,
            "recovery": head_stats.effect_map(cells, heads, n_layers, width),
            "significant": [list(heads[n]) for n in names if cells[n]["significant"]],
            "top": head_stats.top_cells(cells, heads, top),
        }
        found += limits.collect(
            limits.small_group(label, "the usable pairs", len(usable), "a test"),
            limits.excluded(label, {"no clean-corrupted gap": no_gap}, "recovery"),
            limits.excluded(
                label,
                {"with a null or non-finite metric": len(unusable)},
                "recovery",
                keys=sorted(k for keys in unusable.values() for k in keys),
            ),
            limits.corrected_resolution(
                label,
                "recovery",
                n_pairs=len(usable),
                n_resamples=used,
                n_tests=len(names),
                correction=correction,
                items="pairs",
            ),
        )
    return {
        "experiment": EXPERIMENT,
        "limits": found,
        "unit": settings["unit"],
        "pairs": settings["pairs"],
        "seed": settings["seed"],
        "correction": correction,
        "n_resamples": n_resamples,
        "effect": "(patched - corrupted) / (clean - corrupted), mean over pairs",
        "models": models,
    }


def summarize(
    folder: str | Path, *, correction: str | None = None, n_resamples: int | None = None
) -> dict:
    """Summarise ``folder/records.jsonl`` into ``folder/summary.json``.

    ``correction`` and ``n_resamples`` default to those of the summary already there (so
    ``bindscope summarize`` keeps a run's ``--correction``), else ``bh`` and enough
    resamples for one head alone to pass the correction (at least 9999).
    """
    return summarize_tests(
        folder, summarize_patching, correction=correction, n_resamples=n_resamples
    )


__all__ = ["Pair", "load_pairs", "run", "summarize", "summarize_patching"]
