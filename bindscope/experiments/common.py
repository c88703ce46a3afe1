"""Pieces every experiment shares: labels, records, prompt sets, chunked resumable loops."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from bindscope.errors import InputError
from bindscope.prompts.records import PromptSet, load
from bindscope.results.records import (
    RecordWriter,
    model_label,
    provenance,
    read_records,
    record_key,
    write_summary,
)


class RecordFields(Protocol):
    """What a result line takes from the prompt it ran (a PromptRecord, or a generated item)."""

    @property
    def key(self) -> str:
        """The prompt's unique key."""

    @property
    def prompt_id(self) -> str:
        """The prompt's id in its set."""

    @property
    def term(self) -> str:
        """The term the prompt is about ("" when none)."""

    @property
    def task(self) -> str:
        """The task the prompt belongs to."""

    @property
    def control_group(self) -> str | None:
        """The control group, if any."""


def as_pairs(heads: Iterable[Sequence[int]]) -> tuple[tuple[int, int], ...]:
    """Head lists as read from JSON, as the ``(layer, head)`` tuples a spec takes."""
    return tuple((int(layer), int(head)) for layer, head in heads)


def prompt_set(prompts: str | Path | PromptSet) -> PromptSet:
    """Load a prompt set by name or path (or pass one through)."""
    return prompts if isinstance(prompts, PromptSet) else load(prompts)


def base_record(
    experiment: str,
    model,
    record: RecordFields,
    condition: str,
    metrics: dict,
    prov: dict,
    *,
    heads=(),
    ablation: str | None = None,
    **extra,
) -> dict:
    """A result line with the fields every experiment shares (see docs/records.md)."""
    return {
        "experiment": experiment,
        "key": record_key(experiment, model.name, model.revision, record.key, condition),
        "model": model.name,
        "revision": model.revision,
        "family": model.family,
        "prompt_key": record.key,
        "prompt_id": record.prompt_id,
        "term": record.term,
        "task": record.task,
        "control_group": record.control_group,
        "condition": condition,
        "heads": [list(h) for h in heads],
        "ablation": ablation if heads else None,
        "metrics": metrics,
        "provenance": prov,
        **extra,
    }


def binding_metrics(result, model) -> dict:
    """The binding fields of a record's ``metrics``."""
    data = result.to_dict()
    for name in ("key", "prompt_id", "term", "task", "control_group"):
        data.pop(name)
    return {**data, "n_layers": model.n_layers, "n_heads": model.n_heads}


def batch_order(model, records: Iterable) -> list:
    """Records by task, choice count and token length (then key).

    Chunks of items in this order fill whole batches of one kind (recognition scores
    4-choice and True/False items apart), and each batch carries little padding.
    """
    return sorted(
        records,
        key=lambda r: (r.task, len(r.choices or ()), len(model.tokenize(r.template)), r.key),
    )


def chunk_items(batch_size: int, generation_batch_size: int, about: int) -> int:
    """Items per written chunk: ``about``, rounded up to whole batches of both kinds.

    A multiple of both batch sizes (of the larger where their least common multiple is
    large), so that, with items ordered by task, no chunk ends in a part-filled batch except
    where a task ends.
    """
    whole = math.lcm(batch_size, generation_batch_size)
    if whole > 4 * max(batch_size, generation_batch_size):
        whole = max(batch_size, generation_batch_size)
    return whole * math.ceil(about / whole)


def run_chunks(
    items: Sequence,
    *,
    writer: RecordWriter,
    key: Callable[[Any], str],
    work: Callable[[list], list[dict]],
    chunk_size: int,
    desc: str,
    progress: bool,
) -> int:
    """Run ``work`` on the pending items in chunks, writing each chunk's records at once.

    Returns the number of items run (those not already finished on disk).
    """
    from tqdm.auto import tqdm

    if chunk_size < 1:  # a negative batch size would otherwise run nothing and say nothing
        raise InputError(
            f"batch_size must be 1 or more (it gave chunks of {chunk_size} items); pass e.g. "
            "batch_size=16 (--batch-size 16)"
        )
    pending = [item for item in items if key(item) not in writer]
    bar = tqdm(
        total=len(items),
        initial=len(items) - len(pending),
        desc=desc,
        unit="item",
        disable=not progress,
    )
    for start in range(0, len(pending), chunk_size):
        chunk = pending[start : start + chunk_size]
        writer.write_many(work(chunk))
        bar.update(len(chunk))
    bar.close()
    return len(pending)


def load_revision(
    loader: Callable[..., Any], model: str, revision: str, **load_options: Any
) -> Any:
    """One checkpoint of a sweep, refused unless it is the revision asked for.

    Raises:
        InputError: The loaded model is at another revision (the sweep would mislabel it).
    """
    loaded = loader(model, revision=revision, **load_options)
    if loaded.revision != revision:
        raise InputError(
            f"asked for {model}@{revision}, but the loaded model is at revision "
            f"{loaded.revision!r}; the sweep would label one checkpoint as another"
        )
    loaded.name = model
    return loaded


def check_limit(limit) -> None:
    """Refuse a ``limit`` that is neither None nor a positive integer (raises ``InputError``).

    A slice would take ``limit=-1`` as "all but the last" and ``limit=0`` as nothing.
    """
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1:
        raise InputError(
            f"limit={limit!r} is not a positive integer; pass the number of items to take "
            "(e.g. limit=20), or None for all"
        )


def summarize_folder(
    folder: str | Path,
    build: Callable[[list[dict]], dict],
    *,
    check: Callable[[Path, list[dict]], None] | None = None,
) -> dict:
    """Rebuild ``folder/summary.json`` from ``folder/records.jsonl`` alone.

    Args:
        folder: An experiment's results folder.
        build: The experiment's summary of its records.
        check: Called with the folder and records first; raises when they cannot be summarized.

    Returns:
        The summary as written.
    """
    from bindscope.results.schema import EXPERIMENTS

    folder = Path(folder)
    records = list(read_records(folder / "records.jsonl"))
    if folder.name in EXPERIMENTS:  # OUT/<experiment>: check before the build reads them
        check_records_belong(folder, records, folder.name)
    if check is not None:
        check(folder, records)
    summary = build(records)
    check_records_belong(folder, records, summary.get("experiment", folder.name))
    write_summary(folder / "summary.json", summary)
    return summary


def check_records_belong(folder: Path, records: list[dict], experiment: str) -> None:
    """Refuse to summarize a folder none of whose records belong to ``experiment``.

    ``scan`` owns ``scan`` and ``scan-bsi`` records, ``c5`` owns ``c5`` and ``c5-ranking``.
    A summary built from zero of N records would be an empty summary that looks like a result.

    Raises:
        InputError: Every record belongs to another experiment (named in the message).
    """
    if not records or any(
        r["experiment"] == experiment or str(r["experiment"]).startswith(experiment + "-")
        for r in records
    ):
        return
    kinds = sorted({str(r["experiment"]) for r in records})
    raise InputError(
        f"{folder / 'records.jsonl'}: none of its {len(records)} records belongs to "
        f"{experiment} (they are {', '.join(kinds)} records, copied or moved here?); "
        f"put them under OUT/{kinds[0]}/ and summarize that folder, or rerun the "
        f"{experiment} experiment"
    )


def summarize_tests(
    folder: str | Path,
    build: Callable[..., dict],
    *,
    correction: str | None,
    n_resamples: int | None,
) -> dict:
    """``summarize_folder`` for the per-head tests (scan, patching).

    ``correction`` and ``n_resamples`` default to those of the summary already there (so
    ``bindscope summarize`` keeps a run's ``--correction``), else ``bh`` and enough
    resamples for one head alone to pass the correction
    (``bindscope.experiments.head_stats.default_resamples``).
    """
    from bindscope.experiments.head_stats import previous_options

    previous = previous_options(Path(folder) / "summary.json")
    options = {
        "correction": correction or previous.get("correction", "bh"),
        "n_resamples": n_resamples or previous.get("n_resamples"),
    }
    return summarize_folder(folder, lambda records: build(records, **options))


def skipped_reasons(records: Iterable[dict]) -> dict[str, int]:
    """How many records have no EB*, per reason.

    The reason is the audit flag that explains it (``not_found``, ``single_token``,
    ``at_position_0``: the span starts on the attention sink), else the record's skip message.
    """
    counts: dict[str, int] = {}
    for r in records:
        metrics = r["metrics"]
        if metrics.get("eb_star") is not None:
            continue
        flags = metrics.get("flags") or []
        known = [f for f in ("not_found", "single_token", "at_position_0") if f in flags]
        reason = known[0] if known else str(metrics.get("skipped") or ", ".join(flags) or "no EB*")
        counts[reason] = counts.get(reason, 0) + 1
    return counts


#: Where reused binding results come from, relative to the results folder.
BINDING_FROM = "binding/records.jsonl"


def stored_binding(model, out: str | Path, pset: PromptSet) -> dict[str, dict]:
    """The binding metrics ``OUT/binding`` already holds for ``pset`` on ``model``.

    Binding results are computed once per results folder: they are reused when the binding
    run used the same prompt set (content hash), model, revision and BOS policy and dtype
    (its ``settings.json``). Returns ``{prompt key: metrics}``, empty when nothing matches.
    """
    import json

    from bindscope.results.records import read_records
    from bindscope.results.settings import SETTINGS_FILE, model_settings

    folder = Path(out) / "binding"
    records, settings = folder / "records.jsonl", folder / SETTINGS_FILE
    if not (records.is_file() and settings.is_file()):
        return {}
    stored = json.loads(settings.read_text("utf-8"))
    if (stored.get("settings") or {}).get("prompt_sha256") != pset.sha256:
        return {}
    if (stored.get("models") or {}).get(model_label(model)) != model_settings(model):
        return {}
    return {
        r["prompt_key"]: r["metrics"]
        for r in read_records(records)
        if r["experiment"] == "binding"
        and r["model"] == model.name
        and r["revision"] == model.revision
    }


def by_key(records: Iterable[dict]) -> dict[str, dict]:
    """Records indexed by their ``key``."""
    return {r["key"]: r for r in records}


__all__ = [
    "BINDING_FROM",
    "RecordWriter",
    "as_pairs",
    "base_record",
    "binding_metrics",
    "check_limit",
    "load_revision",
    "model_label",
    "prompt_set",
    "provenance",
    "record_key",
    "run_chunks",
    "skipped_reasons",
    "stored_binding",
    "summarize_folder",
    "summarize_tests",
]


def mean_estimate(values, *, seed: int = 0) -> dict | None:
    """Mean with a bootstrap CI as a dict; with one value the CI is null, with none None."""
    from bindscope.metrics import stats

    values = [float(v) for v in values]
    if not values:
        return None
    if len(values) == 1:
        return {
            "value": values[0],
            "low": None,
            "high": None,
            "confidence": 0.95,
            "method": "single value: no interval",
            "n": 1,
        }
    return stats.mean_ci(values, seed=seed).to_dict()
