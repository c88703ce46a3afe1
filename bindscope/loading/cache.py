"""The model cache: one folder per converted embedded model, written once, checked on load."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

from bindscope._version import __version__
from bindscope.errors import ModelLoadError

MANIFEST = "bindscope-cache.json"
WEIGHT_SUFFIX = ".safetensors"
_BLOCK = 1 << 22
KEYS = frozenset({"size", "mtime_ns", "sha256", "header_sha256"})


def cache_dir(cache: str | os.PathLike | None = None) -> Path:
    """Where converted weights live: ``cache``, ``$BINDSCOPE_CACHE`` or ``~/.cache/bindscope``."""
    if cache is not None:
        return Path(cache)
    return Path(os.environ.get("BINDSCOPE_CACHE") or Path.home() / ".cache" / "bindscope")


def _where(cache: Path, given: str | os.PathLike | None) -> str:
    if given is not None:
        return f"the cache folder {cache} (cache=)"
    if os.environ.get("BINDSCOPE_CACHE"):
        return f"BINDSCOPE_CACHE={cache}"
    return f"the cache folder {cache} (default; set BINDSCOPE_CACHE to move it)"


def writable_cache(cache: str | os.PathLike | None = None, *, create: bool = True) -> Path:
    """The cache folder, created unless ``create=False`` (then only checked writable)."""
    folder = cache_dir(cache)
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    problem = None
    if folder.exists() and not folder.is_dir():
        problem = "is a file, not a folder"
    elif not existing.is_dir():
        problem = f"cannot be created: {existing} is a file"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = f"cannot be written to ({existing} is not writable)"
    elif create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = f"cannot be created ({exc.strerror or exc})"
    if problem:
        where = _where(folder, cache)
        raise ModelLoadError(f"{where} {problem}; point it at a folder you can write to")
    return folder


def file_sha256(path: Path) -> str:
    """The sha256 of one file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _header_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        return hashlib.sha256(handle.read(min(length, 1 << 27))).hexdigest()


def _facts(path: Path) -> dict:
    stat = path.stat()
    entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}
    if path.name.endswith(WEIGHT_SUFFIX):
        entry["header_sha256"] = _header_sha256(path)
    return entry


def weights_sha256(files: dict[str, dict]) -> str:
    """One digest for the weight files of a manifest: sha256 over their names and digests."""
    lines = "".join(
        f"{name} {entry['sha256']}\n"
        for name, entry in sorted(files.items())
        if name.endswith(WEIGHT_SUFFIX)
    )
    return hashlib.sha256(lines.encode()).hexdigest()


def write_manifest(folder: Path, **facts: object) -> dict:
    """Record every file of ``folder`` (size, mtime, sha256) in its manifest; return it."""
    files = {
        p.name: _facts(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST
    }
    manifest = {
        "bindscope": __version__,
        **facts,
        "weights_sha256": weights_sha256(files),
        "files": files,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    return manifest


def damage(folder: Path, *, full: bool = False) -> str | None:
    """Why the entry ``folder`` cannot be loaded as it is (None: it matches its manifest).

    The weights' bytes are hashed only when ``full`` or their mtime changed (docs/internals.md).
    """
    if not folder.is_dir():
        return "not converted yet"
    try:
        manifest = json.loads((folder / MANIFEST).read_text("utf-8"))
        files = manifest["files"]
        if not all(set(e) >= KEYS for n, e in files.items() if n.endswith(WEIGHT_SUFFIX)):
            return f"{MANIFEST} lacks the weights' {', '.join(sorted(KEYS))}"
        digest = weights_sha256(files)
        if manifest["weights_sha256"] != digest:
            return (
                f"{MANIFEST}'s weights_sha256 {manifest['weights_sha256']!r} is not the digest "
                f"of the weight files it lists ({digest}): the manifest was edited"
            )
    except FileNotFoundError:
        return f"no {MANIFEST} (written by an earlier bindscope, or a conversion cut short)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{MANIFEST} is unreadable ({type(exc).__name__}: {exc})"
    listed = _listing(folder, files)
    if listed is not None:
        return listed
    try:
        return _contents(folder, manifest, full=full)
    except OSError as exc:  # e.g. a file another user's older bindscope wrote 0600
        return f"a file cannot be read ({exc})"


def _contents(folder: Path, manifest: dict, *, full: bool) -> str | None:
    moved = False
    for name, entry in sorted(manifest["files"].items()):
        path = folder / name
        if name.endswith(WEIGHT_SUFFIX):
            if _header_sha256(path) != entry["header_sha256"]:
                return f"{name}'s header (tensor names, shapes, offsets) changed"
            same_time = path.stat().st_mtime_ns == entry["mtime_ns"]
            moved = moved or not same_time
            if same_time and not full:
                continue
        if file_sha256(path) != entry["sha256"]:
            return f"{name} differs from the file converted (sha256 changed)"
    if moved:
        _record_mtimes(folder, manifest)
    return None


def _listing(folder: Path, files: dict[str, dict]) -> str | None:
    present = {
        p.name
        for p in folder.iterdir()
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(f".{MANIFEST}.")
    }
    for name in sorted(set(files) - present):
        return f"{name} is missing"
    for name in sorted(present - set(files)):
        return f"{name} was added after the conversion"
    for name, entry in sorted(files.items()):
        size = (folder / name).stat().st_size
        if size != entry["size"]:
            return f"{name} has {size:,} bytes, {entry['size']:,} when converted (truncated?)"
    return None


def _record_mtimes(folder: Path, manifest: dict) -> None:
    for name, entry in manifest["files"].items():
        entry["mtime_ns"] = (folder / name).stat().st_mtime_ns
    scratch = folder / f".{MANIFEST}.{os.getpid()}"
    try:
        scratch.write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
        scratch.replace(folder / MANIFEST)  # atomic: a reader sees the old or the new one
    except OSError:
        with suppress(OSError):  # on a read-only mount even unlinking nothing fails (EROFS)
            scratch.unlink(missing_ok=True)


def say(line: str) -> None:
    """One line for the user on stderr."""
    print(f"bindscope: {line}", file=sys.stderr, flush=True)


def manifest(folder: Path) -> dict:
    """The manifest of a checked entry."""
    return json.loads((folder / MANIFEST).read_text("utf-8"))


@contextmanager
def entry_lock(folder: Path) -> Iterator[None]:
    """Hold the lock of the cache entry ``folder``; say on stderr when another holds it."""
    lock = FileLock(folder.parent / f".{folder.name}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say(f"another process is converting into {folder}; waiting for it (lock {lock.lock_file})")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _leftovers(folder: Path) -> list[Path]:
    # also earlier versions' lock-free staging folders, once an hour old
    old = time.time() - 3600
    legacy = [
        p
        for p in folder.parent.glob(".convert-*")
        if re.fullmatch(r"\.convert-[a-z0-9_]{8}", p.name) and p.stat().st_mtime < old
    ]
    return legacy + [
        p
        for prefix in (".convert-", ".replaced-")
        for p in folder.parent.glob(f"{prefix}{folder.name}-*")
    ]


def _umask_modes(staging: Path) -> None:
    # transformers writes model.safetensors 0600, which a shared cache cannot read
    umask = os.umask(0o022)  # the only way to read it: set, then put back at once
    os.umask(umask)
    mode = 0o666 & ~umask
    for path in staging.iterdir():
        if path.is_file():
            path.chmod(mode)


def build(folder: Path, write: Callable[[Path], dict]) -> None:
    """Write the entry ``folder`` atomically, its lock held: ``write(staging)`` gives the facts.

    The manifest is written last, so an entry without one is never a finished entry.
    """
    for stale in _leftovers(folder):  # their converters are gone: we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    staging = folder.parent / f".convert-{folder.name}-{os.getpid()}"
    staging.mkdir()  # default mode: the umask decides who may read the cache
    try:
        facts = write(staging)
        _umask_modes(staging)
        write_manifest(staging, **facts)
        replaced = folder.parent / f".replaced-{folder.name}-{os.getpid()}"
        if folder.exists():
            folder.rename(replaced)
        staging.rename(folder)
        shutil.rmtree(replaced, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
