"""The local server's own network namespace: a loopback device and nothing else.

Ray binds all interfaces whatever it is told, so every piece runs inside; only the API's and
the object store's ports reach the host's 127.0.0.1 (docs/remote.md, "Loopback only").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from bindscope.errors import NdifServerError
from bindscope.local_ndif import processes
from bindscope.local_ndif.processes import Piece, listening

LOOPBACK = Path(__file__).parent / "loopback.py"
HOLDER = "netns"
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with the final NUL
EXPOSED_FLAG = "--allow-exposed-ports"


def inside(holder: int, command: Sequence[str]) -> list[str]:
    """``command`` run in the holder's namespaces (the host's pids, files and user)."""
    enter = ["nsenter", f"--target={holder}", "--user", "--net", "--preserve-credentials"]
    return [*enter, "--", *command]


def holder(home: Path) -> int:
    """The pid of the process that keeps the server's network namespace."""
    pid = processes.leaders(home)[0].get(HOLDER)
    if pid is None:
        raise NdifServerError(
            f"the process that keeps the local NDIF server's network namespace ({home}) is "
            "gone; `bindscope ndif down`, then `up` again"
        )
    return pid


def _separate(home: Path) -> bool:
    pid = processes.leaders(home)[0].get(HOLDER)
    with contextlib.suppress(OSError):
        own = os.readlink("/proc/self/ns/net")
        return pid is not None and os.readlink(f"/proc/{pid}/ns/net") != own
    return False


def holder_piece(home: Path) -> Piece:
    """The process that makes the namespace and keeps it while the server runs."""
    unshare = ["unshare", "--user", "--map-root-user", "--net", "--"]
    command = [*unshare, sys.executable, str(LOOPBACK), "hold"]
    return Piece(HOLDER, command, ready=lambda: _separate(home), timeout=20)


def _missing_tools() -> str:
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not found (util-linux)" if missing else ""


def start(home: Path, env: dict[str, str], *, allow_exposed: bool) -> int | None:
    """Start the holder and bring its loopback up; its pid (None: exposed, as allowed)."""
    socket_dir = home / "run"
    why = _missing_tools()
    if not why and len(str(socket_dir / "65535.sock")) > SOCKET_PATH_MAX:
        why = f"--home {home} is too long for the forwarders' Unix sockets; pick a shorter one"
    if not why:
        try:
            processes.start(home, holder_piece(home), env)
            pid = holder(home)
            command = [sys.executable, str(LOOPBACK), "up"]
            processes.start(home, Piece("loopback", inside(pid, command)), env)
            return pid
        except NdifServerError as error:
            processes.stop(home, [HOLDER], others=False)
            why = f"no user + network namespace could be made here: {error}"
    if not allow_exposed:
        raise NdifServerError(
            f"bindscope ndif up runs the server in a network namespace of its own, so that "
            f"Ray's ports (which bind all interfaces) stay off the network, and {why}. "
            f"Enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 "
            f"or user.max_user_namespaces), or pass {EXPOSED_FLAG} to run with Ray's ports "
            "open to every network this machine is on"
        )
    print(f"bindscope ndif: {EXPOSED_FLAG}: Ray's ports are exposed ({why})", file=sys.stderr)
    return None


def forwarders(home: Path, holder: int, ports: Sequence[int]) -> list[Piece]:
    """The two forwarders that bring ``ports`` of the namespace to the host's 127.0.0.1."""
    folder = home / "run"
    numbers = [str(p) for p in ports]
    sockets = [folder / f"{p}.sock" for p in ports]
    serve = [sys.executable, str(LOOPBACK)]
    return [
        Piece(
            "forward inside",
            inside(holder, [*serve, "inside", str(folder), *numbers]),
            ready=lambda: all(s.exists() for s in sockets),
        ),
        Piece(
            "forward outside",
            [*serve, "outside", str(folder), *numbers],
            ready=lambda: all(listening(p) for p in ports),
        ),
    ]


def remove_sockets(home: Path) -> None:
    """The forwarders' Unix sockets, once they are stopped."""
    folder = home / "run"
    for path in folder.glob("*.sock") if folder.is_dir() else []:
        path.unlink(missing_ok=True)
