"""One check before any experiment resumes: same settings, same inputs, or refuse.

A results folder holds the records of one experiment run with one set of settings (options that
change what a record contains, and content hashes of every input file). The settings live in
``OUT/<experiment>/settings.json``; a rerun into the folder compares its own settings with them
before it computes anything, so finished records are reused only when they are what this run
would have produced. Models are compared per ``name@revision``: a new model (or revision) joins a
folder freely, a model seen before must come with the same dtype and BOS policy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from bindscope.errors import InputError
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label

SETTINGS_FILE = "settings.json"


def content_sha256(value: object) -> str:
    """SHA-256 of a file's bytes, or of a JSON-able value's canonical JSON."""
    if isinstance(value, (str, Path)) and Path(value).is_file():
        return hashlib.sha256(Path(value).read_bytes()).hexdigest()
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_settings(model: LanguageModel) -> dict:
    """What about a loaded model changes its numbers beyond its name and revision."""
    weights = next(model.hf.parameters(), None)
    remote = getattr(model, "remote", False)
    return {
        "dtype": None if weights is None or remote == "ndif" else str(weights.dtype)[6:],
        "prepend_bos": model.prepend_bos,
    }


def _describe(changes: list[tuple[str, object, object]]) -> str:
    return "; ".join(f"{name}: {old!r} then, {new!r} now" for name, old, new in changes)


def check_settings(
    folder: str | Path,
    settings: dict,
    *,
    models: Sequence[LanguageModel] = (),
    force: bool = False,
) -> None:
    """Refuse to resume ``folder`` if its records were made with other settings or inputs.

    Args:
        folder: The experiment's folder (``OUT/<experiment>``).
        settings: Options and input hashes that decide what a record holds (JSON values).
        models: The models this run uses; their dtype and BOS policy must match earlier runs.
        force: Start afresh: the stored settings are replaced (the caller discards the records).

    Raises:
        InputError: The folder holds records made with other settings, or records whose settings
            are unknown; names each difference and how to proceed.
    """
    folder = Path(folder)
    path = folder / SETTINGS_FILE
    records = folder / "records.jsonl"
    new = {"settings": settings, "models": {model_label(m): model_settings(m) for m in models}}
    has_records = records.is_file() and records.stat().st_size > 0
    if has_records and not force:
        if not path.is_file():
            raise InputError(
                f"{records} has no {SETTINGS_FILE} beside it, so the settings its records were "
                "made with are unknown and resuming could mix two runs. Use another --out, or "
                "--force to start afresh"
            )
        old = json.loads(path.read_text("utf-8"))
        changes = [
            (name, old["settings"].get(name), value)
            for name, value in settings.items()
            if old["settings"].get(name) != value
        ]
        changes += [
            (f"{label} {name}", old["models"][label].get(name), value)
            for label, fields in new["models"].items()
            if label in old["models"]
            for name, value in fields.items()
            if old["models"][label].get(name) != value
        ]
        if changes:
            raise InputError(
                f"{folder} holds records made with other settings ({_describe(changes)}); "
                "resuming would mix the two runs in one summary. Use another --out, or --force "
                "to discard the finished records and start afresh"
            )
        new["models"] = {**old["models"], **new["models"]}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n", "utf-8")
    tmp.replace(path)


__all__ = ["check_settings", "content_sha256", "model_settings"]
