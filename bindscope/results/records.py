"""Result records: JSON Lines written as they finish, resumable, with provenance."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from bindscope._version import __version__
from bindscope.errors import BindscopeWarning, RecordFileError
from bindscope.prompts.prompt_sets import PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.labels import label, model_label  # noqa: F401  (re-exported)
from bindscope.results.lock import FolderLock
from bindscope.results.settings import check_settings

SCHEMA = "bindscope.result/1"
REQUIRED = ("schema", "experiment", "key", "model", "condition", "metrics", "provenance")


def record_key(
    experiment: str, model: str, revision: str | None, prompt_key: str, condition: str
) -> str:
    """The unique key of one result line."""
    return "|".join([experiment, model, revision or "main", prompt_key, condition])


def provenance(
    model: LanguageModel,
    *,
    prompt_set: PromptSet | None = None,
    seed: int | None = None,
    **extra: object,
) -> dict:
    """Versions, model identity and run settings stored with every record."""
    # heavy, and needed only where a model ran: reading records and summaries imports none
    import nnsight
    import torch
    import transformers

    remote = getattr(model, "remote", False) or False  # False, "ndif" or "local" (simulated)
    weights = next(model.hf.parameters())
    out = {
        "bindscope": __version__,
        "nnsight": getattr(nnsight, "__version__", "?"),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "model": model.name,
        "revision": model.revision,
        "family": model.family,
        "heads": [model.n_layers, model.n_heads],  # layers x query heads
        "training": getattr(model, "training", None),  # embedded: base or instruction-tuned
        "weights_sha256": getattr(model, "weights_sha256", None),  # embedded: checked on load
        # on NDIF the deployment holds the weights: its dtype is not visible from here
        "dtype": None if remote == "ndif" else str(weights.dtype).replace("torch.", ""),
        "device": "ndif" if remote == "ndif" else str(weights.device),
        "attn_implementation": model.attn_implementation,
        "capture": getattr(model, "capture_method", "eager"),
        "prepend_bos": getattr(model, "prepend_bos", None),
        "remote": remote,
        "seed": seed,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if getattr(model, "capture_fallback", None):
        out["capture_fallback"] = model.capture_fallback
    if remote:
        info = getattr(model, "remote_info", None) or {}
        out["ndif_host"] = info.get("host")  # the host only: never the API key
        out["server_versions"] = info.get("server_versions")
    if prompt_set is not None:
        out |= {"prompt_set": prompt_set.name, "prompt_sha256": prompt_set.sha256}
    out.update(extra)
    return out


def _clean(value: Any) -> Any:
    """Make a value JSON-safe: NaN/inf become null."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class RecordWriter(contextlib.AbstractContextManager["RecordWriter"]):
    """Append result records to a JSON Lines file, fsync'd line by line, under the folder's lock.

    A rerun reads the finished keys (``key in writer``) and drops a line torn by a crash;
    ``force=True`` starts afresh. ``settings`` are checked first (``check_settings``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        force: bool = False,
        settings: dict | None = None,
        models: Sequence[LanguageModel] = (),
    ) -> None:
        self.path = Path(path)
        # one writer per folder: a second run stops here instead of duplicating records
        self._lock = FolderLock(self.path.parent).acquire()
        try:
            if settings is not None:
                check_settings(self.path.parent, settings, models=models, force=force)
            self._open(force)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, force: bool) -> None:
        if force and self.path.exists():
            self.path.unlink()
        self.done: set[str] = set()
        if self.path.exists():
            kept = list(read_records(self.path, tolerate_tail=True, hint=WRITER_HINT))
            self.done = {record["key"] for record in kept}
            # rewrite without a torn last line (or repeated keys) so appends stay valid
            lines = (json.dumps(record, sort_keys=True) + "\n" for record in kept)
            self.path.write_text("".join(lines), "utf-8")
        # opened on the first record: a run that stops before any (a refused option, a
        # failed model load) leaves no records file behind
        self._file: IO[str] | None = None

    def __contains__(self, key: str) -> bool:
        return key in self.done

    def write(self, record: dict) -> None:
        """Validate and append one record, flushing it to disk before returning."""
        record = _clean({"schema": SCHEMA, **record})
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise ValueError(f"result record lacks {missing}: {record.get('key')}")
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.done.add(record["key"])

    def write_many(self, records: Iterable[dict]) -> None:
        """Write each record in turn (see `write`)."""
        for record in records:
            self.write(record)

    def close(self) -> None:
        """Close the file and release the folder's lock."""
        try:
            if self._file is not None:
                self._file.close()
        finally:
            self._lock.release()

    def __exit__(self, *exc: object) -> None:
        self.close()


#: How to repair a corrupt line, told by commands that can redo records (they have --force).
WRITER_HINT = "delete the line (its record is redone on resume) or rerun with --force"
#: The same for readers (summarize, figures, report), which only read.
READER_HINT = "delete the line, then rerun the experiment that wrote it to redo that record"


def _decode_problem(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg})"
    return "nested too deeply"


def _checked_key(record: object, where: str, hint: str) -> str:
    if not isinstance(record, dict):
        raise RecordFileError(f"{where}: a record must be a JSON object; {hint}")
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise RecordFileError(f"{where}: record lacks field(s) {missing}; {hint}")
    if record["schema"] != SCHEMA:
        raise RecordFileError(f"{where}: schema {record['schema']!r}, expected {SCHEMA!r}")
    key = record["key"]
    if not isinstance(key, str):
        raise RecordFileError(f"{where}: field 'key' must be a string; {hint}")
    return key


def _json_lines(path: Path, *, tolerate_tail: bool, hint: str) -> Iterator[tuple[int, Any]]:
    # with tolerate_tail a torn last line ends the file quietly; any other bad line raises
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    for number, data in enumerate(lines, start=1):
        if not data.strip():
            continue
        # only an unterminated last line can be a write cut short by a crash
        torn = number == len(lines) and not raw.endswith(b"\n")
        try:
            record = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            if tolerate_tail and torn:
                return
            reason = _decode_problem(exc)
            raise RecordFileError(f"{path}:{number}: {reason}; {hint}") from None
        yield number, record


def read_records(
    path: str | Path,
    *,
    tolerate_tail: bool = False,
    duplicates: str = "warn",
    hint: str = READER_HINT,
) -> Iterator[dict]:
    """Read and validate a records file (``RecordFileError`` naming the file and line).

    A repeated key is left out with one warning (``duplicates="warn"``) or refused (``"error"``);
    ``tolerate_tail`` skips an unterminated last line (a crash mid-write).
    """
    if duplicates not in ("warn", "error"):
        raise ValueError("duplicates must be 'warn' or 'error'")
    path = Path(path)
    seen: dict[str, int] = {}
    repeated = 0
    for number, record in _json_lines(path, tolerate_tail=tolerate_tail, hint=hint):
        key = _checked_key(record, f"{path}:{number}", hint)
        if key in seen:
            if duplicates == "error":
                raise RecordFileError(
                    f"{path}:{number}: key {key!r} repeats line {seen[key]}; keys are unique "
                    "(docs/records.md), so two runs probably wrote into this folder at once"
                )
            repeated += 1
            continue
        seen[key] = number
        yield record
    if repeated:
        warnings.warn(
            f"{path}: {repeated} record(s) repeat the key of an earlier line and were left out "
            "(keys are unique; two runs probably wrote into this folder at once)",
            BindscopeWarning,
            stacklevel=2,
        )


def write_summary(path: str | Path, summary: dict) -> None:
    """Write a summary JSON atomically."""
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(summary), indent=2, sort_keys=True) + "\n", "utf-8")
    tmp.replace(path)
