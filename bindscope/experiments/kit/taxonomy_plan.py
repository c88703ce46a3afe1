"""Scoring every head of a model for the taxonomy: records of ``OUT/heads``, and head classes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bindscope.errors import InputError
from bindscope.experiments.kit.binding_reuse import reuse_or_bind, stored_binding
from bindscope.experiments.kit.experiment import Common, ModelRun, Plan
from bindscope.experiments.kit.options import Options, option
from bindscope.experiments.kit.record_fields import Item
from bindscope.experiments.kit.taxonomy_summary import CLASSIFICATION_FILE, summarize
from bindscope.metrics import taxonomy
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label
from bindscope.results.records import provenance
from bindscope.runners.taxonomy_scores import repeated_scores, text_scores


def _parse_thresholds(pairs: Sequence[str] | Mapping[str, float] | None) -> dict[str, float]:
    if pairs is None or isinstance(pairs, Mapping):
        return dict(pairs or {})
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            out[name.strip().replace("-", "_")] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise InputError(f"--threshold {pair!r}: expected CLASS=VALUE, e.g. sink=0.6")
    return out


@dataclass(frozen=True)
class TaxonomyOptions(Options):
    """Options of the head taxonomy (``bindscope heads``, ``bindscope sweep --heads``)."""

    n_repeated: int = option(32, "repeated random sequences", least=1)
    repeat_length: int = option(24, "random tokens per copy", least=1)
    top_k: int = option(4, "binding top-k compared with classes", least=1)
    thresholds: Mapping[str, float] | None = option(
        None,
        "classification threshold, repeatable: sink, previous_token, induction, "
        "duplicate_token, binding (defaults: bindscope.metrics.taxonomy.THRESHOLDS)",
        flag="--threshold",
        metavar="CLASS=VALUE",
        repeat=True,
        convert=_parse_thresholds,
    )

    def check(self) -> None:
        """Thresholds that name known head classes."""
        for name, value in (self.thresholds or {}).items():
            if name not in taxonomy.PRECEDENCE:
                raise InputError(
                    f"--threshold {name}={value}: no head class {name!r}; the classes are "
                    f"{', '.join(taxonomy.PRECEDENCE)}"
                )


def check_taxonomy_fit(model: LanguageModel, options: TaxonomyOptions) -> None:
    """Refuse a ``top_k`` above the model's head count or sequences past its context window."""
    total = model.n_layers * model.n_heads
    if options.top_k > total:
        raise InputError(
            f"top_k={options.top_k}: {model_label(model)} has {total} heads ({model.n_layers} "
            f"layers x {model.n_heads}); pass --top-k {total} or less"
        )
    window = getattr(model, "context_length", None)
    need = 2 * options.repeat_length + (1 if model.prepend_bos else 0)
    if window and need > window:
        raise InputError(
            f"repeat_length={options.repeat_length}: a repeated sequence takes {need} tokens, "
            f"more than {model_label(model)}'s context window of {window}; pass "
            f"--repeat-length {(window - 1) // 2} or less"
        )


def taxonomy_plan(
    pset: PromptSet, options: TaxonomyOptions, common: Common, *, sweep: dict | None = None
) -> Plan:
    """The plan of an ``OUT/heads`` folder: every head of each model scored, resumably."""
    # what a heads folder checks when resumed: the prompt set, the random sequences, the seed
    settings = {
        "prompt_sha256": pset.sha256,
        "n_repeated": options.n_repeated,
        "repeat_length": options.repeat_length,
        "seed": common.seed,
    }
    info = {} if sweep is None else {"sweep": sweep}

    def prov(model: LanguageModel) -> dict:
        return provenance(model, prompt_set=pset, seed=common.seed, settings=settings, **info)

    def each(run: ModelRun) -> None:
        _write_classification(run.writer.path.parent, options)
        _score_model(run, pset, settings, batch_size=common.batch_size)

    def items() -> list[tuple[str, str]]:
        keys = [(r.key, "clean") for r in pset]
        return keys + [(_repeated_key(i), "repeated") for i in range(options.n_repeated)]

    return Plan(settings, each, provenance=prov, summarize=summarize, items=items)


def _repeated_key(i: int) -> str:
    return f"repeated/{i:03d}"


def _write_classification(folder: Path, options: TaxonomyOptions) -> None:
    thresholds = {**taxonomy.THRESHOLDS, **(options.thresholds or {})}
    rule = {"thresholds": thresholds, "top_k": options.top_k}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CLASSIFICATION_FILE).write_text(json.dumps(rule, indent=2) + "\n", "utf-8")


def _grid(tensor: Any) -> list:
    return [[None if math.isnan(float(x)) else float(x) for x in row] for row in tensor]


def _score_model(run: ModelRun, pset: PromptSet, settings: dict, *, batch_size: int) -> None:
    model = run.model
    bos = bool(model.prepend_bos)
    shape = {"n_layers": model.n_layers, "n_heads": model.n_heads, "position_0_is_bos": bos}

    stored = stored_binding(model, run.writer.path.parents[1], pset)  # computed once per folder

    def prompt_work(chunk: list[PromptRecord]) -> list[dict]:
        bound = reuse_or_bind(run, chunk, batch_size=batch_size, stored=stored)
        templates = sorted({r.template for r in chunk})
        scores = dict(zip(templates, text_scores(model, templates, batch_size=batch_size)))
        out = []
        for r, found, prov in bound:
            s = scores[r.template]
            extra = {name: _grid(s[name]) for name in taxonomy.TEXT_SCORES}
            n = len(model.tokenize(r.template))
            metrics = {**found, **extra, **shape, "n_tokens": n}
            out.append(run.record(r, "clean", metrics, prov=prov))
        return out

    label = model_label(model)
    run.chunks(pset.records, prompt_work, chunk_size=batch_size * 4, desc=f"heads {label} prompts")
    n, length, seed = settings["n_repeated"], settings["repeat_length"], settings["seed"]

    def repeated_work(chunk: list[int]) -> list[dict]:
        # every sequence is drawn (the draw is seeded as a whole), only the chunk is run
        scores, tokens = repeated_scores(
            model, n=n, length=length, seed=seed, batch_size=batch_size
        )
        out = []
        for i in chunk:
            item = Item(_repeated_key(i), "induction", f"repeated-{i:03d}")
            metrics = {
                **{name: _grid(scores[i][name]) for name in taxonomy.REPEATED_SCORES},
                **shape,
                "tokens": tokens[i],
                "length": length,
                "start": 1 if bos else 0,
            }
            out.append(run.record(item, "repeated", metrics))
        return out

    run.chunks(
        list(range(n)),
        repeated_work,
        key=lambda i: run.key(_repeated_key(i), "repeated"),
        chunk_size=max(n, 1),
        desc=f"heads {label} repeated",
    )


def primary_classes(
    model: LanguageModel, texts: Sequence[str], *, seed: int = 0, batch_size: int = 16
) -> list[list[str]]:
    """Each head's primary class from every score but binding (``[L][H]`` class names)."""
    means = taxonomy_means(model, texts, seed=seed, batch_size=batch_size)
    return taxonomy.classify(means)["primary"]


def taxonomy_means(
    model: LanguageModel, texts: Sequence[str], *, seed: int = 0, batch_size: int = 16
) -> dict[str, Any]:
    """Every head's mean taxonomy score but binding: ``{score: [L, H] array}``."""
    scored = text_scores(model, list(dict.fromkeys(texts)), batch_size=batch_size)
    sequences = TaxonomyOptions()
    repeated, _ = repeated_scores(
        model, n=sequences.n_repeated, length=sequences.repeat_length, seed=seed,
        batch_size=batch_size,
    )  # fmt: skip
    means = {
        n: np.nanmean(np.stack([s[n].numpy() for s in scored]), 0) for n in taxonomy.TEXT_SCORES
    }
    for name in taxonomy.REPEATED_SCORES:
        means[name] = np.stack([s[name].numpy() for s in repeated]).mean(0)
    return means


__all__ = [
    "primary_classes",
    "taxonomy_means",
    "taxonomy_plan",
]
