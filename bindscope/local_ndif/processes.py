"""Start and stop the server's pieces, each in its own session, with a pid record and a log.

Nothing is counted or signalled unless its pid record proves the live process is ours
(docs/remote.md, "Pid records"); a record that fails the proof is stale: removed, never used.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from bindscope.errors import NdifServerError

LISTEN = "0A"  # a TCP socket's state in /proc/net/tcp


@dataclass(frozen=True)
class Piece:
    """One server process, run in a session of its own so its whole tree can be stopped.

    ``ready`` is polled until true for ``timeout`` seconds; None: a one-shot that must exit 0.
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


@dataclass(frozen=True)
class PidRecord:
    """What ``start`` wrote of a piece's session leader: enough to prove it is still ours.

    A bare pid (older files) has no start time: it must lead a session working in ``cwd``.
    """

    pid: int
    create_time: float | None
    command: list[str]
    cwd: str = ""

    def proven(self) -> bool:
        """The live process ``pid`` leads its own session and started at ``create_time``."""
        try:
            process = psutil.Process(self.pid)
            if os.getsid(self.pid) != self.pid:
                return False
            if self.create_time is None:
                return Path(process.cwd()) == Path(self.cwd).resolve()
            return process.create_time() == self.create_time
        except (psutil.Error, OSError):
            return False


def listening(port: int, pid: int | str = "self") -> bool:
    """A TCP socket listens on ``port`` in the network namespace of process ``pid``.

    Read from ``/proc``: a connection from here would not reach inside the namespace.
    """
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def _pid_file(home: Path, slug: str) -> Path:
    return home / "run" / f"{slug}.pid"


def read_record(path: Path) -> PidRecord:
    """The pid record in ``path``; ``NdifServerError`` if unreadable or damaged."""
    try:
        found = json.loads(path.read_text())
        if isinstance(found, int):  # a bare pid, from before pid records
            return PidRecord(found, None, [], cwd=str(path.parent.parent))
        return PidRecord(int(found["pid"]), float(found["create_time"]), list(found["command"]))
    except OSError as error:
        raise NdifServerError(f"cannot read the pid file {path}: {error.strerror}") from None
    except (ValueError, TypeError, KeyError):
        raise NdifServerError(
            f"the pid file {path} is not a pid record of `bindscope ndif up` (damaged); "
            "nothing was signalled. If no server piece runs from this folder, delete the "
            "file and retry"
        ) from None


def prepare_home(home: Path) -> None:
    """Make ``home``'s folders for pid files and logs, and prove it takes files."""
    try:
        for folder in (home / "run", home / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        probe = home / "run" / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise NdifServerError(
            f"--home {home}: cannot write there ({error.strerror}: {error.filename}); "
            "give a folder you can write"
        ) from None


def _tail(path: Path, lines: int = 8) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _record(home: Path, piece: Piece, pid: int) -> None:
    with contextlib.suppress(psutil.Error):  # gone already: the wait below says why
        created = psutil.Process(pid).create_time()
        record = PidRecord(pid, created, list(piece.command))
        _pid_file(home, piece.slug).write_text(json.dumps(asdict(record)))


def start(home: Path, piece: Piece, env: Mapping[str, str]) -> None:
    """Start ``piece`` and wait until it is ready (or, one-shot, has exited 0)."""
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
        _record(home, piece, process.pid)
    deadline = time.monotonic() + piece.timeout
    while (code := process.poll()) is None and time.monotonic() < deadline:
        if piece.ready is not None and piece.ready():
            return
        time.sleep(0.25)
    if code == 0 and piece.ready is None:  # exited: a one-shot's success, else a failure
        return
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


def leaders(home: Path) -> tuple[dict[str, int], list[str]]:
    """Each started piece's proven session leader, and a note per stale pid file (removed)."""
    proven: dict[str, int] = {}
    stale: list[str] = []
    folder = home / "run"
    for path in sorted(folder.glob("*.pid")) if folder.is_dir() else []:
        record = read_record(path)
        if record.proven():
            proven[path.stem] = record.pid
            continue
        stale.append(
            f"{path.stem}: removed the stale pid file {path} (pid {record.pid} is gone or is "
            "another process now; nothing was signalled)"
        )
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return proven, stale


def running(home: Path) -> dict[str, list[psutil.Process]]:
    """The live, proven processes of each started piece (an empty dict: nothing runs)."""
    found = {
        slug: [p for p in _members(pid) if _alive(p)] for slug, pid in leaders(home)[0].items()
    }
    return {slug: members for slug, members in found.items() if members}


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.status() != psutil.STATUS_ZOMBIE
    return False


def stop(home: Path, order: Sequence[str], *, others: bool = True) -> tuple[list[str], list[str]]:
    """Stop ``order``'s pieces last first, then (``others``) the rest; what stopped, stale notes."""
    found, stale = leaders(home)
    rest = sorted(set(found) - set(order)) if others else []
    stopped = []
    for slug in [*reversed(order), *rest]:
        if slug in found:
            _stop_session(found[slug])
            _pid_file(home, slug).unlink(missing_ok=True)
            stopped.append(slug)
    return stopped, stale
