"""Building, starting, checking, stopping the local NDIF server (``up``, ``down``, ``status``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from bindscope.errors import NdifServerError
from bindscope.local_ndif import netns, pieces, processes
from bindscope.local_ndif.pieces import DEFAULT_PORT, Ports, host, venv_python
from bindscope.local_ndif.processes import Piece, listening

STATE = "server.json"
PYTHON = "python3.11"
TORCH = "torch==2.13.0"
# ndif 0.1.2 says Requires-Python >=3.12, but only cp311 CPU torch wheels exist here (3.12
# pulls the CUDA build); its code runs on 3.11. --only-binary keeps pip off a numpy sdist
# that needs 3.12. Every pin matters: ndif 0.1.x calls nnsight APIs newer releases change.
PINS = (
    "ndif[api,ray]==0.1.2",
    "nnsight==0.8.1",
    "ray==2.60.0",
    "transformers==5.24.0",
    "accelerate==1.15.0",
    "peft==0.21.2",
    "fastapi==0.165.0",
    "gunicorn==27.0.1",
    "numpy==2.4.6",
    "gguf==0.19.0",
    # The object store: moto's S3 server (ndif's docs use rustfs, which no registry carries).
    "moto==5.2.5",
    "flask==3.1.3",
    "flask-cors==6.0.5",
)
STAMP = ".bindscope-ndif-installed"


def _stamp_text() -> str:
    return "\n".join((TORCH, *PINS)) + "\n"


def ready(venv: Path) -> bool:
    """The venv exists and was built with today's pins."""
    stamp = venv / STAMP
    return stamp.is_file() and stamp.read_text() == _stamp_text()


def build(venv: Path, log: Path) -> None:
    """Build the server venv once (about 2 minutes and 1.7 GB); later calls return at once."""
    if ready(venv):
        return
    python = shutil.which(PYTHON)
    if python is None:
        raise NdifServerError(
            f"bindscope ndif up needs {PYTHON} for the server's venv (ndif's CPU torch "
            "wheels are cp311 only); install it (apt-get install python3.11-venv) and retry"
        )
    started = time.perf_counter()
    print(f"bindscope ndif: building the server venv in {venv} (once, ~2 min)", file=sys.stderr)
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    steps = [
        [python, "-m", "venv", "--clear", str(venv)],
        [*pip, TORCH],  # first and alone: nothing may pull a CUDA torch
        [*pip, "--ignore-requires-python", "--only-binary=:all:", TORCH, *PINS],
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        for step in steps:
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise NdifServerError(
                    f"building the NDIF server venv failed at `{' '.join(step[:6])} ...`; see {log}"
                )
    (venv / STAMP).write_text(_stamp_text())
    print(
        f"bindscope ndif: server venv built in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )


def _serving(where: str) -> set[str]:
    try:
        with urllib.request.urlopen(f"{where}/status", timeout=5) as response:
            status = json.load(response)
    except (OSError, ValueError):
        return set()
    deployments = status.get("deployments", {}).values()
    return {d.get("repo_id") for d in deployments if d.get("application_state") == "RUNNING"}


def _wait_serving(where: str, repos: list[str], home: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not set(repos) <= _serving(where):
        if time.monotonic() > deadline:
            raise NdifServerError(
                f"NDIF deployed {', '.join(repos)} but its /status does not report them "
                f"running after {timeout:.0f} s; see {home / 'logs'} (deploy.log, api.log)"
            )
        time.sleep(2)


def _state(home: Path) -> dict | None:
    path = home / STATE
    try:
        state = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError) as error:
        state = error
    if state is None or (
        isinstance(state, dict)
        and isinstance(state.get("port"), int)
        and isinstance(state.get("host"), str)
    ):
        return state
    raise NdifServerError(
        f"{path} is damaged (not the JSON object `bindscope ndif up` writes: {state!s:.80}); "
        f"if no server runs from {home}, delete it and retry"
    )


def _free_ports(home: Path, port: int) -> Ports:
    if processes.running(home):
        raise NdifServerError(
            f"a local NDIF server from {home} is already running; `bindscope ndif down` first"
        )
    ports = Ports.of(port)
    busy = [p for p in asdict(ports).values() if listening(p)]
    if busy:
        raise NdifServerError(
            f"ports {busy} on 127.0.0.1 are in use; pick another --port (the server uses "
            f"{port} and {port + 1000}-{port + 1004})"
        )
    return ports


def _deploy(
    home: Path, env: dict[str, str], models: Mapping[str, Path], state: dict, holder: int | None
) -> None:
    sandboxed = state["sandboxed"] or pieces.SANDBOX_KEY_ENV in env
    actor = pieces.SANDBOXED_ACTOR if sandboxed else pieces.CPU_ACTOR
    found = pieces.specs(Path(state["hub_cache"]), models, trusted=True)
    spec_file = home / "deploy.json"
    spec_file.write_text(json.dumps([{**spec, "actor_class": actor} for spec in found]))
    python = str(venv_python(home / "venv"))
    command = [python, str(pieces.NDIF_SIDE / "bindscope_ndif_cpu.py"), "deploy", str(spec_file)]
    if holder is not None:
        command = netns.inside(holder, command)
    processes.start(home, Piece("deploy", command, timeout=600), env)


def _sandbox_digest(sandboxed: bool, sandbox_key: str | None) -> str:
    if sandbox_key is not None and not sandbox_key.strip():
        raise NdifServerError("--sandbox-key is empty: give the API key to run sandboxed")
    if sandboxed and sandbox_key:
        raise NdifServerError(
            "--sandboxed runs every request sandboxed and --sandbox-key only one key's: "
            "give one of them"
        )
    return pieces.key_digest(sandbox_key) if sandbox_key else ""


def up(
    *,
    home: Path,
    models: Mapping[str, Path],
    port: int = DEFAULT_PORT,
    hub_cache: Path,
    sandboxed: bool = False,
    sandbox_key: str | None = None,
    allow_exposed: bool = False,
) -> str:
    """Build the venv once, start every piece, deploy ``models``; the host to use.

    ``models`` maps Hub ids to float32 safetensors folders, placed in ``hub_cache``; the
    options are ``bindscope ndif up``'s. A failure stops again everything that did start.
    """
    digest = _sandbox_digest(sandboxed, sandbox_key)
    processes.prepare_home(home)
    ports = _free_ports(home, port)
    state: dict = {"port": port, "host": host(port), "models": [], "netns": False}
    state |= {"sandboxed": sandboxed, "hub_cache": str(hub_cache), "sandbox_key_sha256": digest}
    env = pieces.server_environment(home, state)
    _write_state(home, state)
    try:
        holder = _prepare(home, env, state, allow_exposed)
        started = time.perf_counter()
        for piece in pieces.pieces(home, ports, holder):
            processes.start(home, piece, env)
        _deploy(home, env, models, state, holder)
        # /status is a cache the API refreshes now and then: wait until it shows the models
        _wait_serving(host(port), list(models), home)
    except BaseException:
        down(home=home)
        raise
    state["models"] = list(models)
    state["started_s"] = round(time.perf_counter() - started, 1)
    _write_state(home, state)
    return host(port)


def _write_state(home: Path, state: dict) -> None:
    (home / STATE).write_text(json.dumps(state))


def _prepare(home: Path, env: dict[str, str], state: dict, allow_exposed: bool) -> int | None:
    """Make the namespace (first: a refusal before minutes of building), the venv, redis."""
    holder = netns.start(home, env, allow_exposed=allow_exposed)
    state["netns"] = holder is not None
    _write_state(home, state)
    build(home / "venv", home / "logs" / "venv.log")
    pieces.redis_server()  # installed now if missing
    return holder


def _piece(home: Path, name: str) -> tuple[Piece, dict[str, str]]:
    state = _state(home)
    if state is None:
        raise NdifServerError(f"no local NDIF server runs from {home}; `bindscope ndif up` first")
    holder = netns.holder(home) if state.get("netns") else None
    found = {p.slug: p for p in pieces.pieces(home, Ports.of(state["port"]), holder) if p.ready}
    if name not in found:
        raise NdifServerError(f"no piece {name!r}; the pieces are {', '.join(found)}")
    return found[name], pieces.server_environment(home, state)


def stop_piece(*, home: Path, name: str) -> None:
    """Stop one piece of a running server (``api``: clients then find no server)."""
    piece, _ = _piece(home, name)
    processes.stop(home, [piece.slug], others=False)


def start_piece(*, home: Path, name: str) -> None:
    """Start again a piece that `stop_piece` stopped."""
    piece, env = _piece(home, name)
    processes.start(home, piece, env)


def down(*, home: Path) -> tuple[list[str], list[str]]:
    """Stop every piece ``up`` started; the pieces stopped, and a note per stale pid file."""
    try:
        stopped, stale = processes.stop(home, pieces.ORDER) if home.is_dir() else ([], [])
        netns.remove_sockets(home)
        (home / STATE).unlink(missing_ok=True)
    except OSError as error:
        raise NdifServerError(
            f"--home {home}: {error.strerror} ({error.filename}); give the folder the "
            "server was started with"
        ) from None
    return stopped, stale


def _checked(home: Path, state: dict) -> list[Piece]:
    if not state.get("netns"):
        return pieces.pieces(home, Ports.of(state["port"]), None)
    found, _ = processes.leaders(home)
    # the holder, or any piece started inside: the namespace whose ports are read
    inside = [found[s] for s in (netns.HOLDER, *pieces.INSIDE) if s in found]
    holder = inside[0] if inside else -1
    return [netns.holder_piece(home), *pieces.pieces(home, Ports.of(state["port"]), holder)]


def status(*, home: Path) -> dict:
    """Each piece's process count, the pieces dead (no process, or its port silent), stale notes."""
    state = _state(home)
    _, stale = processes.leaders(home) if home.is_dir() else ({}, [])
    if state is None:
        return {"pieces": {}, "dead": {}, "stale": stale, "api_answers": False}
    alive = processes.running(home)
    dead = {}
    for piece in _checked(home, state):
        if piece.ready is None:
            continue
        if piece.slug not in alive:
            dead[piece.slug] = "no process"
        elif not piece.ready():
            dead[piece.slug] = "runs, but does not answer (its port; the API: /status)"
    counts = {name: len(members) for name, members in alive.items()}
    pinged = pieces.answers(f"{state['host']}/ping")
    return {**state, "pieces": counts, "dead": dead, "stale": stale, "api_answers": pinged}
