"""Check result records against the documented schema (``docs/records.md``)."""

from __future__ import annotations

from pathlib import Path

from bindscope.families import FAMILIES
from bindscope.results.records import SCHEMA, read_records, record_key

# scan-bsi: the BSI records a head scan compares its effect map with; scan-estimate: each
# prompt's attribution-patching estimates of every head (scan --method attribution)
EXPERIMENTS = (
    "binding",
    "c5",
    "c5-ranking",
    "sweep",
    "fewshot",
    "controls",
    "heads",
    "scan",
    "scan-bsi",
    "scan-estimate",
    "patching",
)
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
HEAD_TEXT_METRICS = ("sink", "previous_token", "spread", "position_0_is_bos", "n_tokens")
HEAD_REPEATED_METRICS = ("induction", "duplicate_token", "tokens", "length", "start", "n_layers")
CONDITIONS = {
    "binding": ("clean",),
    "c5-ranking": ("clean",),
    "sweep": ("clean",),
    "controls": ("clean",),
    "scan-bsi": ("clean",),
    "scan-estimate": ("estimate",),
    "fewshot": ("zero_shot", "few_shot", "paraphrase"),
    "heads": ("clean", "repeated"),
}


def problems(record: dict) -> list[str]:
    """What is wrong with one record (empty when it matches the schema)."""
    out = _type_problems(record)
    if out:
        return out
    return (
        _identity_problems(record)
        + _head_problems(record)
        + _condition_problems(record)
        + _content_problems(record)
    )


def _type_problems(record: dict) -> list[str]:
    """Missing fields and fields of the wrong type."""
    out = []

    def need(name, kinds):
        if name not in record:
            out.append(f"missing field {name!r}")
        elif not isinstance(record[name], kinds):
            out.append(f"field {name!r} is {type(record[name]).__name__}")

    for name in ("schema", "experiment", "key", "model", "family", "prompt_key"):
        need(name, str)
    for name in ("prompt_id", "term", "task", "condition"):
        need(name, str)
    need("revision", (str, type(None)))
    need("control_group", (str, type(None)))
    need("heads", list)
    need("metrics", dict)
    need("provenance", dict)
    return out


def _is_repeated(record: dict) -> bool:
    """A head-taxonomy record of a repeated random sequence (task ``induction``)."""
    return record["experiment"] == "heads" and record["condition"] == "repeated"


def _identity_problems(record: dict) -> list[str]:
    """Schema, experiment, family, task, and a key that matches its fields."""
    out = []
    if record["schema"] != SCHEMA:
        out.append(f"schema {record['schema']!r} is not {SCHEMA!r}")
    experiment = record["experiment"]
    if experiment not in EXPERIMENTS:
        out.append(f"unknown experiment {experiment!r}")
    if record["family"] not in {f.name for f in FAMILIES}:
        out.append(f"unknown family {record['family']!r}")
    repeated = _is_repeated(record)
    if record["task"] not in (("induction",) if repeated else ("recognition", "generation")):
        out.append(f"unknown task {record['task']!r}")
    expected = record_key(
        experiment, record["model"], record["revision"], record["prompt_key"], record["condition"]
    )
    if record["key"] != expected:
        out.append(f"key {record['key']!r} does not match its fields ({expected!r})")
    return out


def _head_problems(record: dict) -> list[str]:
    """Heads are integer pairs and the ablation fits them."""
    out = []
    heads = record["heads"]
    if not all(
        isinstance(h, list) and len(h) == 2 and all(isinstance(x, int) for x in h) for h in heads
    ):
        out.append("heads must be a list of [layer, head] integer pairs")
    if record.get("ablation") not in (("zero", "mean", "resample", "patch") if heads else (None,)):
        out.append(f"ablation {record.get('ablation')!r} does not fit heads {heads}")
    return out


def _condition_problems(record: dict) -> list[str]:
    """The condition is one its experiment knows."""
    experiment, condition = record["experiment"], record["condition"]
    allowed = CONDITIONS.get(experiment)
    if experiment in ("scan", "patching"):
        if condition != "clean" and not condition.startswith("L"):
            return [f"unknown {experiment} condition {condition!r}"]
    elif experiment == "c5":
        if condition not in ("baseline", "top", "bottom") and not condition.startswith("random:"):
            return [f"unknown c5 condition {condition!r}"]
    elif allowed and condition not in allowed:
        return [f"unknown {experiment} condition {condition!r}"]
    return []


def _content_problems(record: dict) -> list[str]:
    """Provenance and metrics carry the fields their experiment requires."""
    out = []
    experiment = record["experiment"]
    repeated = _is_repeated(record)
    missing = [k for k in PROVENANCE if k not in record["provenance"]]
    if missing:
        out.append(f"provenance lacks {missing}")
    metrics = record["metrics"]
    wanted: tuple[str, ...] = ()
    if experiment in ("binding", "c5-ranking", "controls", "sweep", "scan-bsi"):
        wanted = BINDING_METRICS + (("behaviour",) if experiment == "sweep" else ())
    elif experiment == "heads":
        wanted = HEAD_REPEATED_METRICS if repeated else BINDING_METRICS + HEAD_TEXT_METRICS
    elif experiment in ("c5", "fewshot"):
        wanted = RECOGNITION_METRICS if record["task"] == "recognition" else GENERATION_METRICS
    elif experiment == "scan":
        wanted = SCAN_METRICS + (RECOGNITION_METRICS if record["task"] == "recognition" else ())
    elif experiment == "patching":
        wanted = PATCHING_METRICS
    elif experiment == "scan-estimate":
        wanted = ("logprob", "estimate")
    missing = [k for k in wanted if k not in metrics]
    if missing:
        out.append(f"metrics lack {missing}")
    return out


def validate_file(path: str | Path) -> int:
    """Validate every record of a records file; returns the number of records.

    Raises:
        RecordFileError: A line breaks the schema or repeats a key (file, line and the
            problem named).
    """
    from bindscope.errors import RecordFileError

    count = 0
    for count, record in enumerate(read_records(path, duplicates="error"), start=1):
        found = problems(record)
        if found:
            raise RecordFileError(f"{path}:{count}: {'; '.join(found)}")
    return count


__all__ = ["EXPERIMENTS", "problems", "validate_file"]
