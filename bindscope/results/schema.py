"""Check result records against the documented schema (``docs/records.md``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bindscope.errors import RecordFileError
from bindscope.families import FAMILIES
from bindscope.metrics.binding import MEASURES
from bindscope.results.records import SCHEMA, read_records, record_key
from bindscope.results.summaries import VERSION_FIELDS

PROVENANCE = (
    *VERSION_FIELDS,
    "model",
    "revision",
    "family",
    "dtype",
    "device",
    "attn_implementation",
    "capture",
    "remote",
    "prompt_set",
    "prompt_sha256",
    "seed",
    "time",
)
#: A binding record's metrics: the `BindingResult` measures and the head counts.
BINDING_METRICS = (*MEASURES, "n_layers", "n_heads")
RECOGNITION_METRICS = ("score", "prediction", "choice_scores")
GENERATION_METRICS = ("score", "text", "hits", "contradictions")
TASKS = ("recognition", "generation")
#: Every record's fields and the types each may hold.
FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(("schema", "experiment", "key", "model", "family", "prompt_key"), str),
    **dict.fromkeys(("prompt_id", "term", "task", "condition"), str),
    **dict.fromkeys(("revision", "control_group"), (str, type(None))),
    **{"heads": list, "metrics": dict, "provenance": dict},
}


def behaviour_metrics(record: dict) -> tuple[str, ...]:
    """The metrics a recognition or a generation record holds (by its task)."""
    return RECOGNITION_METRICS if record["task"] == "recognition" else GENERATION_METRICS


@dataclass(frozen=True)
class RecordKind:
    """What one kind of record (one ``experiment`` field value) may hold.

    ``prefixes`` are condition prefixes allowed besides ``conditions`` (``L`` for ``L3.H5``);
    ``metrics`` and ``tasks`` give, per record, the metric fields it needs and its tasks.
    """

    experiment: str
    conditions: tuple[str, ...] = ("clean",)
    prefixes: tuple[str, ...] = ()
    metrics: Callable[[dict], tuple[str, ...]] = lambda record: ()
    tasks: Callable[[dict], tuple[str, ...]] = lambda record: TASKS

    def allows(self, condition: str) -> bool:
        """Whether ``condition`` is one this kind of record may have."""
        return condition in self.conditions or condition.startswith(self.prefixes or ("\0",))


def binding_kind(experiment: str, *extra: str) -> RecordKind:
    """A kind of record that holds binding metrics (BSI, EB*), plus ``extra`` metrics."""
    return RecordKind(experiment, metrics=lambda record: BINDING_METRICS + extra)


def problems(record: dict, kinds: Mapping[str, RecordKind]) -> list[str]:
    """What is wrong with one record, against ``kinds`` (``registry.record_kinds()``)."""
    out = _type_problems(record)
    if out:
        return out
    kind = kinds.get(record["experiment"])
    if kind is None:
        return [f"unknown experiment {record['experiment']!r}"]
    return [message for wrong, message in _checks(record, kind) if wrong]


def _type_problems(record: dict) -> list[str]:
    out = []
    for name, kinds in FIELD_TYPES.items():
        if name not in record:
            out.append(f"missing field {name!r}")
        elif not isinstance(record[name], kinds):
            out.append(f"field {name!r} is {type(record[name]).__name__}")
    return out


def _checks(record: dict, kind: RecordKind) -> list[tuple[bool, str]]:
    # (whether it is wrong, what is wrong) for a record whose fields have the right types
    parts = ("experiment", "model", "revision", "prompt_key", "condition")  # record_key's order
    expected = record_key(*(record[name] for name in parts))
    heads, ablation = record["heads"], record.get("ablation")
    ablations = ("zero", "mean", "resample", "patch") if heads else (None,)
    families = {f.name for f in FAMILIES}
    pairs = all(
        isinstance(h, list) and len(h) == 2 and all(isinstance(x, int) for x in h) for h in heads
    )
    lacks = {
        part: [k for k in names if k not in record[part]]
        for part, names in (("provenance", PROVENANCE), ("metrics", kind.metrics(record)))
    }
    return [
        (record["schema"] != SCHEMA, f"schema {record['schema']!r} is not {SCHEMA!r}"),
        (record["family"] not in families, f"unknown family {record['family']!r}"),
        (record["task"] not in kind.tasks(record), f"unknown task {record['task']!r}"),
        (
            record["key"] != expected,
            f"key {record['key']!r} does not match its fields ({expected!r})",
        ),
        (not pairs, "heads must be a list of [layer, head] integer pairs"),
        (ablation not in ablations, f"ablation {ablation!r} does not fit heads {heads}"),
        (
            not kind.allows(record["condition"]),
            f"unknown {record['experiment']} condition {record['condition']!r}",
        ),
        (bool(lacks["provenance"]), f"provenance lacks {lacks['provenance']}"),
        (bool(lacks["metrics"]), f"metrics lack {lacks['metrics']}"),
    ]


def validate_file(path: str | Path, kinds: Mapping[str, RecordKind]) -> int:
    """Validate every record of a records file against ``kinds``; returns the number of records."""
    count = 0
    for count, record in enumerate(read_records(path, duplicates="error"), start=1):
        found = problems(record, kinds)
        if found:
            raise RecordFileError(f"{path}:{count}: {'; '.join(found)}")
    return count


__all__ = ["RecordKind", "behaviour_metrics", "binding_kind", "problems", "validate_file"]
