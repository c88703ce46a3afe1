"""One check before any experiment resumes: same settings, same inputs, or refuse."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from bindscope._version import __version__
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


def versions() -> dict[str, str | None]:
    """The versions of bindscope and its libraries (package metadata: nothing heavy imported)."""
    found: dict[str, str | None] = {"bindscope": __version__}
    for name in ("transformers", "torch", "nnsight"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def read_settings(path: str | Path) -> dict:
    """A folder's ``settings.json``, checked: ``{"settings": {...}, "models": {...}, ...}``."""
    path = Path(path)
    fix = f"delete {path} and rerun with --force to start afresh, or use another --out"
    try:
        found = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else exc
        raise InputError(f"{path} is damaged ({why}); {fix}") from None
    if not isinstance(found, dict) or not all(
        isinstance(found.get(part), dict) for part in ("settings", "models")
    ):
        raise InputError(
            f"{path} is damaged: it must be a JSON object with 'settings' and 'models' "
            f"objects, as bindscope writes it; {fix}"
        )
    return found


def check_resumable(
    folder: str | Path, settings: dict, *, models: dict | None = None
) -> dict | None:
    """The stored settings of ``folder``'s records (None if none); ``InputError`` if they differ.

    Writes nothing, so the command line can call it before any model loads. ``settings`` decide
    what a record holds; ``models`` maps ``name@revision`` to this run's model settings.
    """
    folder = Path(folder)
    path = folder / SETTINGS_FILE
    records = folder / "records.jsonl"
    if not (records.is_file() and records.stat().st_size > 0):
        return None
    if not path.is_file():
        raise InputError(
            f"{records} has no {SETTINGS_FILE} beside it, so the settings its records were "
            "made with are unknown and resuming could mix two runs. Use another --out, or "
            "--force to start afresh"
        )
    old = read_settings(path)
    changes = _changes(old, settings, models or {})
    if changes:
        described = "; ".join(f"{name}: {then!r} then, {now!r} now" for name, then, now in changes)
        raise InputError(
            f"{folder} holds records made with other settings ({described}); "
            "resuming would mix the two runs in one summary. Use another --out, or --force "
            "to discard the finished records and start afresh"
        )
    return old


def _changes(old: dict, settings: dict, models: dict) -> list[tuple[str, Any, Any]]:
    """``(what, then, now)`` for each setting, package version and model field that differs."""
    changes = [
        (name, old["settings"].get(name), value)
        for name, value in settings.items()
        if old["settings"].get(name) != value
    ]
    before = old.get("versions") or {}
    changes += [
        (f"{name} version", before.get(name, "not recorded"), value)
        for name, value in versions().items()
        if before.get(name, "not recorded") != value
    ]
    changes += [
        (f"{label} {name}", old["models"][label].get(name), value)
        for label, fields in models.items()
        if isinstance(old["models"].get(label), dict)
        for name, value in fields.items()
        if old["models"][label].get(name) != value
    ]
    return changes


def check_settings(
    folder: str | Path, settings: dict, *, models: Sequence[LanguageModel] = (), force: bool = False
) -> None:
    """`check_resumable` (unless ``force``), then store this run's settings."""
    folder = Path(folder)
    path = folder / SETTINGS_FILE
    new = {
        "settings": settings,
        "models": {model_label(m): model_settings(m) for m in models},
        "versions": versions(),
    }
    old = None if force else check_resumable(folder, settings, models=new["models"])
    if old is not None:
        new["models"] = {**old["models"], **new["models"]}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n", "utf-8")
    tmp.replace(path)


__all__ = [
    "check_resumable",
    "check_settings",
    "content_sha256",
    "model_settings",
    "read_settings",
    "versions",
]
