"""Per-head activation patching: which heads carry the clean prompt's answer?"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bindscope.batch import token_ids
from bindscope.errors import InputError
from bindscope.experiments.kit import attribution_method, limits, per_head_tests
from bindscope.experiments.kit.ablation_sets import as_pairs, conditions_of
from bindscope.experiments.kit.attribution_method import AttributionOptions
from bindscope.experiments.kit.experiment import Common, Experiment, ModelRun, Plan
from bindscope.experiments.kit.options import option
from bindscope.experiments.kit.summary import summarize_tests
from bindscope.interventions import Patch
from bindscope.prompts.continuations import appended, continuation_ids
from bindscope.prompts.pairs import Pair, load_pairs
from bindscope.protocols import LanguageModel
from bindscope.results.labels import by_model, model_label
from bindscope.results.records import provenance
from bindscope.results.schema import RecordKind
from bindscope.runners.attribution_metrics import LogitDifference, Metric, TargetLogprob
from bindscope.runners.attribution_patching import all_heads

EXPERIMENT = "patching"
#: ``--method attribution``: each pair's estimate of every head (docs/records.md).
ESTIMATE = "patching-estimate"
#: What every patching record's metrics hold.
PATCHED = ("clean", "corrupted", "patched")


@dataclass(frozen=True)
class Prepared:
    """A pair as one model runs it: both texts and its metric."""

    pair: Pair
    clean: Any  # a string, or token ids (prompt + target)
    corrupted: Any
    metric: Metric  # also what attribution patching differentiates

    @property
    def key(self) -> str:
        """The pair's key."""
        return self.pair.key

    def measure(self, logits: Any) -> float:
        """The metric of one text's logits ``[n, V]``."""
        if isinstance(self.metric, LogitDifference):
            return float(logits[-1, self.metric.correct] - logits[-1, self.metric.wrong])
        logp = logits.float().log_softmax(-1)
        n = logits.shape[0]
        target = range(n - self.metric.n_target, n)  # the same ids in both texts
        return float(np.mean([float(logp[p - 1, self.clean[p]]) for p in target]))


def prepare(model: LanguageModel, pair: Pair) -> Prepared:
    """The two texts as run, and the pair's metric as a function of logits and as a `Metric`."""
    tok = model.tokenizer
    if pair.clean_answer is not None and pair.corrupted_answer is not None:
        answers = (pair.clean_answer, pair.corrupted_answer)
        ids = [continuation_ids(tok, a) for a in answers]
        if any(len(i) != 1 for i in ids):
            raise InputError(
                f"pair {pair.key}: clean_answer and corrupted_answer must be one token each "
                f"under {model.name}'s tokenizer as they follow the prompt "
                f"({', '.join(repr(appended(a)) for a in answers)}: "
                f"{[len(i) for i in ids]} tokens)"
            )
        difference = LogitDifference(ids[0][0], ids[1][0])
        return Prepared(pair, pair.clean, pair.corrupted, difference)
    assert pair.target is not None  # a pair has a target or both answers (load_pairs)
    target = continuation_ids(tok, pair.target)
    clean = model.tokenize(pair.clean) + target
    corrupted = model.tokenize(pair.corrupted) + target
    return Prepared(pair, clean, corrupted, TargetLogprob(len(target)))


def _prepare_all(
    model: LanguageModel, pairs: list[Pair], name: str, limit: int | None
) -> tuple[list[Prepared], int]:
    found = [prepare(model, pair) for pair in pairs]
    # skipped: unequal lengths under another tokenizer than the one the pairs were matched under
    prepared = [p for p in found if _length(model, p.clean) == _length(model, p.corrupted)]
    if not prepared:
        raise InputError(f"{name}: no pair tokenizes to equal lengths under {model.name}")
    return prepared[:limit], len(found) - len(prepared)


@dataclass(frozen=True)
class PatchingOptions(AttributionOptions):
    """The options of activation patching (``bindscope patch``; ``run(model, *, out, ...)``)."""

    UNITS: ClassVar[tuple[str, ...]] = ("head", "layer", "position", "head_position")

    pairs: str | Path = option("pairs", "'pairs' (built-in) or a pair file, docs/records.md")
    unit: str = option(
        "head",
        "one condition per head, per layer (every head of it), per layer and token position, "
        "or per head and token position (head_position)",
        choices=UNITS,
    )

    def check(self) -> None:
        """Unit, correction and limit; a pair file that reads; resamples that fit in memory."""
        super().check()
        pairs, _, _ = load_pairs(self.pairs)
        per_head_tests.check_resamples(self.n_resamples, len(pairs[: self.limit]))


def _plan(models: list[LanguageModel], opts: PatchingOptions, common: Common) -> Plan:
    found, name, sha = load_pairs(opts.pairs)
    settings = {"unit": opts.unit, "seed": common.seed, "limit": opts.limit}
    settings |= {"pairs": name, "pairs_sha256": sha} | opts.method_settings()
    # the pairs are prepared under each model's tokenizer, checked before any record
    prepared = {id(m): _prepare_all(m, found, name, opts.limit) for m in models}

    def prov(model: LanguageModel) -> dict:
        found = provenance(
            model,
            seed=common.seed,
            patching=settings,
            n_layers=model.n_layers,
            n_heads=model.n_heads,
            pairs_skipped=prepared[id(model)][1],
        )
        return {**found, "prompt_set": name, "prompt_sha256": sha}

    def each(run: ModelRun) -> None:
        model = run.model
        items = prepared[id(model)][0]
        shortest = min(_length(model, p.corrupted) for p in items)
        conditions = _conditions(model, opts.unit, shortest)
        names = list(conditions)
        if "verify" in settings:  # estimate every head, patch the top ones exactly
            chosen = _estimate(run, items, settings, common)
            names = [n for n in names if n in chosen]

        def work(chunk: list[Prepared]) -> list[dict]:
            patch = {n: conditions[n] for n in names}
            return [r for p in chunk for r in _pair_records(run, p, patch, settings, common)]

        run.chunks(
            items,
            work,
            key=lambda p: run.key(p.key, names[-1]),
            chunk_size=max(1, common.batch_size // 4),
            desc=f"patching {model_label(model)}",
        )

    summary = functools.partial(summarize, correction=opts.correction, n_resamples=opts.n_resamples)
    return Plan(settings, each, provenance=prov, summarize=summary)


def _pair_records(
    run: ModelRun,
    p: Prepared,
    patch: dict[str, tuple[list, int | None]],
    settings: dict,
    common: Common,
) -> list[dict]:
    model = run.model
    base = model.logits([p.clean, p.corrupted], batch_size=common.batch_size)
    values = {"clean": p.measure(base[0]), "corrupted": p.measure(base[1])}
    last = _length(model, p.corrupted) - 1
    patched = model.logits(
        [p.corrupted] * len(patch),
        per_row=[
            Patch(
                as_pairs(heads),
                source=(p.clean,),
                positions=None if offset is None else (last - offset,),
            )
            for heads, offset in patch.values()
        ],
        batch_size=common.batch_size,
    )
    measured = {"clean": values["clean"], **{n: p.measure(x) for n, x in zip(patch, patched)}}
    out = []
    for condition, value in measured.items():
        if run.done(p.key, condition):
            continue
        heads, offset = patch.get(condition, ([], None))
        metrics = {**values, "patched": value}
        if offset is not None:
            metrics["position_from_end"] = offset
        out.append(
            run.record(p.pair, condition, metrics, heads=heads, ablation="patch", patching=settings)
        )
    return out


def _estimate(run: ModelRun, items: list[Prepared], settings: dict, common: Common) -> list[str]:
    model = run.model
    every = tuple(all_heads(model))

    def rows(p: Prepared) -> attribution_method.Row:
        return p.corrupted, p.metric, Patch(every, source=(p.clean,))

    def fields(p: Prepared, value: float, change: np.ndarray) -> dict:
        metrics = {"corrupted": value, "estimate": change.tolist()}
        return run.record(
            p.pair, "estimate", metrics, name=ESTIMATE, ablation="patch", patching=settings
        )

    return attribution_method.estimate_heads(
        run, items, experiment=ESTIMATE, rows=rows, fields=fields, verify=settings["verify"],
        batch_size=common.batch_size,
    )  # fmt: skip


def _length(model: LanguageModel, text: str | Sequence[int]) -> int:
    return len(token_ids(model, text))


def _conditions(
    model: LanguageModel, unit: str, shortest: int
) -> dict[str, tuple[list, int | None]]:
    # each condition's heads and its position from the end (None: every position)
    if unit not in ("position", "head_position"):
        return {name: (heads, None) for name, heads in conditions_of(model, unit).items()}
    units = conditions_of(model, "layer" if unit == "position" else "head")
    return {f"{n}.P{p}": (heads, p) for n, heads in units.items() for p in range(shortest)}


def summarize_patching(
    records: list[dict], *, correction: str = "bh", n_resamples: int | None = None, top: int = 10
) -> dict:
    """Recovery maps with CIs and adjusted p per model, and the top conditions."""
    evaluated = [r for r in records if r["experiment"] == EXPERIMENT]
    if not evaluated:
        return {"experiment": EXPERIMENT, "models": {}}
    settings = evaluated[0]["patching"]
    estimates = [r for r in records if r["experiment"] == ESTIMATE]
    models, found = {}, []
    for label, group in by_model(evaluated).items():
        entry, usable, n_tests, unusable = _summarize_model(
            group, settings, correction=correction, n_resamples=n_resamples, top=top
        )
        if settings.get("method") == "attribution":
            _add_estimates(entry, by_model(estimates).get(label, []), usable, n_tests)
        models[label] = entry
        found += _model_limits(label, entry, unusable, n_tests, correction)
    return {
        "experiment": EXPERIMENT,
        "limits": found,
        "unit": settings["unit"],
        "method": settings.get("method", "exact"),
        "verify": settings.get("verify"),
        "pairs": settings["pairs"],
        "seed": settings["seed"],
        "correction": correction,
        "n_resamples": n_resamples,
        "effect": "(patched - corrupted) / (clean - corrupted), mean over pairs",
        "models": models,
    }


def _tabulate(group: list[dict], unit: str) -> tuple[dict, dict, dict, dict]:
    table: dict[str, dict[str, float]] = {}
    heads: dict[str, list] = {}
    ends: dict[str, tuple[float, float]] = {}
    unusable: dict[str, list[str]] = {}
    for r in group:
        m = r["metrics"]
        ends[r["prompt_key"]] = (m["clean"], m["corrupted"])
        if not all(per_head_tests.finite(m.get(f)) for f in ("clean", "corrupted", "patched")):
            unusable.setdefault(r["prompt_key"], []).append(r["key"])
        if r["condition"] == "clean":
            continue
        h, column = r["heads"], m.get("position_from_end", 0)  # position units: columns
        cell = {"head": h[0], "head_position": [*h[0], column]}
        heads[r["condition"]] = cell.get(unit, [h[0][0], column])
        table.setdefault(r["condition"], {})[r["prompt_key"]] = m["patched"]
    return table, heads, ends, unusable


def _summarize_model(
    group: list[dict], settings: dict, *, correction: str, n_resamples: int | None, top: int
) -> tuple[dict, dict, int, dict[str, list[str]]]:
    first = group[0]
    n_layers, n_heads = first["provenance"]["n_layers"], first["provenance"]["n_heads"]
    positions = [r["metrics"].get("position_from_end") for r in group]
    n_positions = 1 + max((p for p in positions if p is not None), default=0)
    width = {"head": n_heads, "layer": 1, "position": n_positions,
             "head_position": (n_heads, n_positions)}[settings["unit"]]  # fmt: skip
    table, heads, ends, unusable = _tabulate(group, settings["unit"])
    names = sorted(table, key=lambda n: heads[n])
    # attribution: the patched heads were chosen among all, so tests count all heads
    attribution = settings.get("method") == "attribution"
    n_tests = n_layers * n_heads if attribution else len(names)
    usable = sorted(
        p
        for p, (c, x) in ends.items()
        if p not in unusable and c != x and all(p in table[n] for n in names)
    )
    no_gap = len(ends) - len(unusable) - len(usable)
    used = n_resamples or per_head_tests.default_resamples(n_tests)
    gaps = np.array([ends[p][0] - ends[p][1] for p in usable])
    corrupted = np.array([ends[p][1] for p in usable])
    recovery = {n: (np.array([table[n][p] for p in usable]) - corrupted) / gaps for n in names}
    cells = per_head_tests.tested_cells(
        {n: (r, np.zeros_like(r)) for n, r in recovery.items()},
        seed=settings["seed"], n_resamples=used, correction=correction, n_tests=n_tests,
    )  # fmt: skip
    entry = {
        "model": first["model"],
        "revision": first["revision"],
        "n_layers": n_layers,
        "n_heads": n_heads,
        "n_resamples": used,
        "n_pairs": len(usable),
        "n_pairs_no_gap": no_gap,
        "pairs_skipped": first["provenance"].get("pairs_skipped", 0),
        "mean_gap": float(np.mean(gaps)) if len(gaps) else math.nan,
        "recovery": per_head_tests.effect_map(cells, heads, n_layers, width),
        "significant": [list(heads[n]) for n in names if cells[n]["significant"]],
        "top": per_head_tests.top_cells(cells, heads, len(cells) if attribution else top),
    }
    return entry, {p: ends[p] for p in usable}, n_tests, unusable


def _model_limits(
    label: str, entry: dict, unusable: dict[str, list[str]], n_tests: int, correction: str
) -> list[dict]:
    n_pairs = entry["n_pairs"]
    return limits.collect(
        limits.small_group(label, "the usable pairs", n_pairs, "a test"),
        limits.excluded(label, {"no clean-corrupted gap": entry["n_pairs_no_gap"]}, "recovery"),
        limits.excluded(
            label,
            {"with a null or non-finite metric": len(unusable)},
            "recovery",
            keys=sorted(k for keys in unusable.values() for k in keys),
        ),
        limits.corrected_resolution(
            label,
            "recovery",
            n_pairs=n_pairs,
            n_resamples=entry["n_resamples"],
            n_tests=n_tests,
            correction=correction,
            items="pairs",
        ),
    )


def _add_estimates(entry: dict, estimates: list[dict], ends: dict, n_tests: int) -> None:
    by_pair = {r["prompt_key"]: r["metrics"]["estimate"] for r in estimates}
    used = [p for p in ends if p in by_pair]
    entry["n_tests"] = n_tests
    entry["verified"] = [list(c["head"]) for c in entry["top"]]
    if not used:
        return
    ratio = [np.array(by_pair[p], dtype=float) / (ends[p][0] - ends[p][1]) for p in used]
    attribution_method.add_estimate(entry, ratio, "n_estimated_pairs")


summarize = functools.partial(summarize_tests, build=summarize_patching, name=EXPERIMENT)


def _model_lines(label: str, m: dict, top: int) -> list[str]:
    out = [
        f"  {label}: {m['n_pairs']} pairs ({m['n_pairs_no_gap']} without a gap, "
        f"{m['pairs_skipped']} of unequal length skipped); "
        f"{len(m['significant'])} significant"
    ]
    out += [f"    {per_head_tests.cell_line(c)}" for c in m["top"][:top]]
    return out + per_head_tests.agreement_lines(m.get("agreement"))


text = functools.partial(
    per_head_tests.summary_lines, title="Activation patching", model_lines=_model_lines
)


CONDITIONS = RecordKind(EXPERIMENT, prefixes=("L",), metrics=lambda record: PATCHED)
ESTIMATES = RecordKind(
    ESTIMATE, conditions=("estimate",), metrics=lambda record: ("corrupted", "estimate")
)
DEFINITION = Experiment(
    EXPERIMENT, "patch", "patch each head from clean into corrupted runs", PatchingOptions,
    summarize, text, records=(CONDITIONS, ESTIMATES), plan=_plan,
)  # fmt: skip
run = DEFINITION.run

__all__ = [
    "DEFINITION",
    "ESTIMATE",
    "Pair",
    "PatchingOptions",
    "Prepared",
    "load_pairs",
    "prepare",
    "run",
    "summarize",
    "summarize_patching",
]
