"""One writer per results folder: an OS-level lock held while records are written."""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from bindscope.errors import InputError, ResultsLockedError

LOCK_NAME = ".bindscope.lock"
INFO_NAME = ".bindscope.lock.json"


class FolderLock:
    """Hold ``folder``'s writer lock from ``acquire()`` (or ``with``) until ``release()``."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._lock: Any = None  # a filelock lock while held

    def acquire(self) -> FolderLock:
        """Take the lock without waiting (``ResultsLockedError`` if held); record who holds it."""
        check_writable(self.folder)
        lock = FileLock(str(self.folder / LOCK_NAME), timeout=0)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise ResultsLockedError(
                f"{self.folder} is being written by another bindscope run ({_holder(self.folder)});"
                " two writers would record every prompt twice. Wait for that run to finish, or "
                "pass another --out"
            ) from None
        self._lock = lock
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": " ".join(sys.argv) or "python",
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        (self.folder / INFO_NAME).write_text(json.dumps(info) + "\n", "utf-8")
        return self

    def release(self) -> None:
        """Release the lock (a no-op when not held)."""
        if self._lock is None:
            return
        try:
            (self.folder / INFO_NAME).unlink(missing_ok=True)
        finally:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(folder: Path) -> str:
    try:
        info = json.loads((folder / INFO_NAME).read_text("utf-8"))
        return (
            f"pid {info['pid']} on host {info['host']}, started {info['started']}: "
            f"`{info['command']}`"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not said who it is yet"


def check_writable(folder: str | Path) -> Path:
    """Create ``folder`` if needed and check that files can be written in it (else InputError)."""
    folder = Path(folder)
    for part in (folder, *folder.parents):
        if part.exists() and not part.is_dir():
            raise InputError(
                f"{folder}: {part} is a file, not a folder; pass a folder for --out "
                "(it is created when missing)"
            )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".bindscope-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(
            f"{folder}: cannot write results here ({exc.strerror or exc}); pass an --out "
            "folder you can write to"
        ) from None
    return folder


__all__ = ["FolderLock", "check_writable"]
