"""Start and stop the server's pieces, each in its own session, with a pid file and a log."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bindscope.errors import NdifServerError


@dataclass(frozen=True)
class Piece:
    """One server process: how to start it and how to tell that it is ready.

    Attributes:
        name: What messages call it (``redis``, ``object store``, ``ray``, ...).
        command: The command line; it runs in a new session (``setsid``), so the whole
            tree it starts can be stopped by process group and session.
        ready: Polled until true; None for a one-shot command that must exit 0.
        timeout: Seconds to wait for ``ready`` (or the one-shot's exit).
    """

    name: str
    command: Sequence[str]
    ready: Callable[[], bool] | None = None
    timeout: float = 60.0
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The name in file names (pid file, log)."""
        return self.name.replace(" ", "-")


def listening(port: int) -> bool:
    """Something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _pid_file(home: Path, slug: str) -> Path:
    return home / "run" / f"{slug}.pid"


def _tail(path: Path, lines: int = 8) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def start(home: Path, piece: Piece, env: Mapping[str, str]) -> None:
    """Start ``piece`` and wait until it is ready (or, one-shot, has exited 0).

    Raises:
        NdifServerError: It exited or was not ready in time; the message names the piece,
            its log and the log's last lines.
    """
    log = home / "logs" / f"{piece.slug}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _pid_file(home, piece.slug).parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(piece.command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, **piece.env},
            cwd=home,
            start_new_session=True,
        )
    if piece.ready is not None:
        _pid_file(home, piece.slug).write_text(str(process.pid))
    deadline = time.monotonic() + piece.timeout
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:  # exited: a one-shot's success, else a failure
            if piece.ready is None and code == 0:
                return
            break
        if piece.ready is not None and piece.ready():
            return
        time.sleep(0.25)
    else:
        code = None
    if process.poll() is None:
        _stop_session(process.pid)
    why = (
        f"exited with status {code}" if code is not None else f"not ready in {piece.timeout:.0f} s"
    )
    raise NdifServerError(
        f"NDIF server piece '{piece.name}' {why}; its log is {log}:\n{_tail(log)}\n"
        "Run `bindscope ndif down` to stop what did start."
    )


def _members(leader: int) -> list[psutil.Process]:
    """The leader, its descendants and every process of its session (what setsid made)."""
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(leader)
        found[leader] = process
        found |= {p.pid: p for p in process.children(recursive=True)}
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(process.pid) == leader:
                found[process.pid] = process
    return list(found.values())


def _stop_session(leader: int, grace: float = 10.0) -> None:
    """TERM the session's processes (and group), then KILL what is left after ``grace``."""
    members = _members(leader)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGTERM)
    for process in members:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(members, timeout=grace)
    for process in alive + _members(leader):
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=5)


def running(home: Path) -> dict[str, list[psutil.Process]]:
    """Each started piece's live processes, by pid file (empty lists for dead ones)."""
    return {
        pid_file.stem: [p for p in _members(int(pid_file.read_text())) if _alive(p)]
        for pid_file in sorted((home / "run").glob("*.pid"))
    }


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.status() != psutil.STATUS_ZOMBIE
    return False


def stop(home: Path, order: Sequence[str], *, others: bool = True) -> list[str]:
    """Stop the pieces of ``order`` (last first); the names of those stopped.

    With ``others``, then any other piece that has a pid file (what ``down`` wants).
    """
    stopped = []
    files = {p.stem: p for p in (home / "run").glob("*.pid")} if (home / "run").is_dir() else {}
    rest = sorted(set(files) - set(order)) if others else []
    for slug in [*reversed(order), *rest]:
        if slug in files:
            _stop_session(int(files[slug].read_text()))
            files[slug].unlink()
            stopped.append(slug)
    return stopped
