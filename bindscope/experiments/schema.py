"""Check result records against the documented schema (``docs/records.md``)."""

from __future__ import annotations

from pathlib import Path

from bindscope.experiments.records import SCHEMA, read_records, record_key
from bindscope.families import FAMILIES

EXPERIMENTS = ("binding", "c5", "c5-ranking", "sweep", "fewshot", "controls")
# issue 11: head scan (and the BSI it is compared with) and activation patching
EXPERIMENTS += ("scan", "scan-bsi", "patching")
SCAN_METRICS = ("logprob",)
PATCHING_METRICS = ("clean", "corrupted", "patched")
PROVENANCE = (
    "bindscope",
    "nnsight",
    "transformers",
    "torch",
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
BINDING_METRICS = (
    "eb_star",
    "eb_star_norm",
    "best_layer",
    "entropy",
    "n_span",
    "span",
    "span_tokens",
    "flags",
    "skipped",
    "eb",
    "bsi",
    "n_layers",
    "n_heads",
)
RECOGNITION_METRICS = ("score", "prediction", "choice_scores")
GENERATION_METRICS = ("score", "text", "hits", "contradictions")
CONDITIONS = {
    "binding": ("clean",),
    "c5-ranking": ("clean",),
    "sweep": ("clean",),
    "controls": ("clean",),
    "scan-bsi": ("clean",),
    "fewshot": ("zero_shot", "few_shot", "paraphrase"),
}


def problems(record: dict) -> list[str]:
    """What is wrong with one record (empty when it matches the schema)."""
    out = []

    def need(name, kinds, where=record):
        if name not in where:
            out.append(f"missing field {name!r}")
        elif not isinstance(where[name], kinds):
            out.append(f"field {name!r} is {type(where[name]).__name__}")

    for name in ("schema", "experiment", "key", "model", "family", "prompt_key"):
        need(name, str)
    for name in ("prompt_id", "term", "task", "condition"):
        need(name, str)
    need("revision", (str, type(None)))
    need("control_group", (str, type(None)))
    need("heads", list)
    need("metrics", dict)
    need("provenance", dict)
    if out:
        return out
    if record["schema"] != SCHEMA:
        out.append(f"schema {record['schema']!r} is not {SCHEMA!r}")
    experiment = record["experiment"]
    if experiment not in EXPERIMENTS:
        out.append(f"unknown experiment {experiment!r}")
    if record["family"] not in {f.name for f in FAMILIES}:
        out.append(f"unknown family {record['family']!r}")
    if record["task"] not in ("recognition", "generation"):
        out.append(f"unknown task {record['task']!r}")
    expected = record_key(
        experiment, record["model"], record["revision"], record["prompt_key"], record["condition"]
    )
    if record["key"] != expected:
        out.append(f"key {record['key']!r} does not match its fields ({expected!r})")
    heads = record["heads"]
    if not all(
        isinstance(h, list) and len(h) == 2 and all(isinstance(x, int) for x in h) for h in heads
    ):
        out.append("heads must be a list of [layer, head] integer pairs")
    if record.get("ablation") not in (("zero", "mean", "patch") if heads else (None,)):
        out.append(f"ablation {record.get('ablation')!r} does not fit heads {heads}")
    allowed = CONDITIONS.get(experiment)
    condition = record["condition"]
    if experiment in ("scan", "patching"):
        if condition != "clean" and not condition.startswith("L"):
            out.append(f"unknown {experiment} condition {condition!r}")
    elif experiment == "c5":
        if condition not in ("baseline", "top", "bottom") and not condition.startswith("random:"):
            out.append(f"unknown c5 condition {condition!r}")
    elif allowed and condition not in allowed:
        out.append(f"unknown {experiment} condition {condition!r}")
    missing = [k for k in PROVENANCE if k not in record["provenance"]]
    if missing:
        out.append(f"provenance lacks {missing}")
    metrics = record["metrics"]
    wanted: tuple[str, ...] = ()
    if experiment in ("binding", "c5-ranking", "controls", "sweep", "scan-bsi"):
        wanted = BINDING_METRICS + (("behaviour",) if experiment == "sweep" else ())
    elif experiment in ("c5", "fewshot"):
        wanted = RECOGNITION_METRICS if record["task"] == "recognition" else GENERATION_METRICS
    elif experiment == "scan":
        wanted = SCAN_METRICS + (RECOGNITION_METRICS if record["task"] == "recognition" else ())
    elif experiment == "patching":
        wanted = PATCHING_METRICS
    missing = [k for k in wanted if k not in metrics]
    if missing:
        out.append(f"metrics lack {missing}")
    return out


def validate_file(path: str | Path) -> int:
    """Validate every record of a records file; returns the number of records.

    Raises:
        RecordFileError: A line breaks the schema (file, line and the problem named).
    """
    from bindscope.errors import RecordFileError

    count = 0
    for count, record in enumerate(read_records(path), start=1):
        found = problems(record)
        if found:
            raise RecordFileError(f"{path}:{count}: {'; '.join(found)}")
    return count


__all__ = ["EXPERIMENTS", "problems", "validate_file"]
