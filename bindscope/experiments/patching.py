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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bindscope.errors import InputError, PromptFileError
from bindscope.experiments import head_stats, limits
from bindscope.experiments.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.head_sets import as_pairs, conditions_of
from bindscope.experiments.head_stats import HeadTestOptions, summary_lines
from bindscope.experiments.options import option
from bindscope.experiments.summary import summarize_tests
from bindscope.interventions import Patch
from bindscope.prompts.datafiles import data_path
from bindscope.protocols import LanguageModel
from bindscope.results.labels import by_model, model_label
from bindscope.results.records import provenance
from bindscope.results.schema import RecordKind
from bindscope.results.settings import content_sha256

EXPERIMENT = "patching"
#: What every patching record's metrics hold.
PATCHED = ("clean", "corrupted", "patched")


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

    @property
    def prompt_id(self) -> str:
        """The pair's id (what a prompt's id is to other records)."""
        return self.pair_id

    @property
    def task(self) -> str:
        """``recognition`` for a target pair, ``generation`` for an answer pair."""
        return "recognition" if self.target is not None else "generation"


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


def _texts_and_metric(model: LanguageModel, pair: Pair) -> tuple[Any, Any, Callable[[Any], float]]:
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

        def logit_difference(logits: Any) -> float:
            return float(logits[-1, ids[0][0]] - logits[-1, ids[1][0]])

        return pair.clean, pair.corrupted, logit_difference
    target = tok(pair.target, add_special_tokens=False)["input_ids"]
    clean = model.tokenize(pair.clean) + target
    corrupted = model.tokenize(pair.corrupted) + target

    def metric(logits: Any) -> float:
        logp = logits.float().log_softmax(-1)
        n = logits.shape[0]
        return float(np.mean([float(logp[p - 1, clean[p]]) for p in range(n - len(target), n)]))

    return clean, corrupted, metric


@dataclass(frozen=True)
class PatchingOptions(HeadTestOptions):
    """The options of activation patching (``bindscope patch``; ``run(model, *, out, ...)``).

    ``run`` patches every head (or layer) from clean into corrupted runs of one ``Model``
    and writes records and a summary; ``batch_size`` is texts per forward pass and ``seed``
    seeds the bootstrap and permutation tests.

    Attributes:
        pairs: ``pairs`` (the built-in set) or a pair file path.
        unit: ``head``, ``layer``, or ``position``: every head of one layer patched at one
            token position, counted from the end (``L3.P0`` is layer 3 at the last token),
            over the positions every pair has.
    """

    UNITS: ClassVar[tuple[str, ...]] = ("head", "layer", "position")

    pairs: str | Path = option("pairs", "'pairs' (built-in) or a pair file, docs/records.md")
    unit: str = option(
        "head",
        "one condition per head, per layer (every head of it), or per layer and token position",
        choices=UNITS,
    )

    def check(self) -> None:
        """Unit, correction and limit; a pair file that reads; resamples that fit in memory."""
        super().check()
        pairs, _, _ = load_pairs(self.pairs)
        head_stats.check_resamples(self.n_resamples, len(pairs[: self.limit]))


def _plan(models: list[LanguageModel], opts: PatchingOptions, common: Common) -> Plan:
    (model,) = models  # one model: the pairs are prepared under its tokenizer
    found, name, sha = load_pairs(opts.pairs)
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
    prepared = prepared[: opts.limit]
    if not prepared:
        raise InputError(f"{name}: no pair tokenizes to equal lengths under {model.name}")
    settings = {"unit": opts.unit, "seed": common.seed, "limit": opts.limit}
    settings |= {"pairs": name, "pairs_sha256": sha}
    shortest = min(_length(model, corrupted) for _, _, corrupted, _ in prepared)
    conditions, offsets = _conditions(model, opts.unit, shortest)
    names = list(conditions)

    def prov(model: LanguageModel) -> dict:
        found = provenance(
            model,
            seed=common.seed,
            patching=settings,
            n_layers=model.n_layers,
            n_heads=model.n_heads,
            pairs_skipped=skipped,
        )
        return {**found, "prompt_set": name, "prompt_sha256": sha}

    def each(run: ModelRun) -> None:
        def work(chunk: list[tuple[Pair, Any, Any, Callable[..., float]]]) -> list[dict]:
            out = []
            for pair, clean, corrupted, metric in chunk:
                base = model.logits([clean, corrupted], batch_size=common.batch_size)
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
                    batch_size=common.batch_size,
                )
                rows: list[tuple[str, list, float]] = [("clean", [], values["clean"])]
                rows += [(n, conditions[n], metric(p)) for n, p in zip(names, patched)]
                for condition, heads, value in rows:
                    if run.done(pair.key, condition):
                        continue
                    metrics = {**values, "patched": value}
                    if condition in offsets:
                        metrics["position_from_end"] = offsets[condition]
                    out.append(
                        run.record(
                            pair,
                            condition,
                            metrics,
                            heads=heads,
                            ablation="patch",
                            patching=settings,
                        )
                    )
            return out

        run.chunks(
            prepared,
            work,
            key=lambda item: run.key(item[0].key, names[-1]),
            chunk_size=max(1, common.batch_size // 4),
            desc=f"patching {model_label(model)}",
        )

    def summary(folder: Path) -> dict:
        return summarize(folder, correction=opts.correction, n_resamples=opts.n_resamples)

    return Plan(settings, each, provenance=prov, summarize=summary)


def _length(model: LanguageModel, text: str | Sequence[int]) -> int:
    """Tokens of a text as run (token-id lists are already tokens)."""
    return len(text) if not isinstance(text, str) else len(model.tokenize(text))


def _conditions(model: LanguageModel, unit: str, shortest: int) -> tuple[dict, dict[str, int]]:
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
    """Rebuild ``folder/summary.json``; the test options as in ``summary.summarize_tests``."""
    return summarize_tests(
        folder,
        summarize_patching,
        name=EXPERIMENT,
        correction=correction,
        n_resamples=n_resamples,
    )


CONDITIONS = RecordKind(EXPERIMENT, prefixes=("L",), metrics=lambda record: PATCHED)
DEFINITION = Experiment(
    EXPERIMENT, "patch", "patch each head from clean into corrupted runs", PatchingOptions,
    summarize, summary_lines, records=(CONDITIONS,), plan=_plan,
)  # fmt: skip
run = DEFINITION.run

__all__ = [
    "DEFINITION",
    "Pair",
    "PatchingOptions",
    "load_pairs",
    "run",
    "summarize",
    "summarize_patching",
]
