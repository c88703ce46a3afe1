"""A local NDIF server: ``bindscope ndif up`` / ``down`` / ``status``.

The real server (the ``ndif`` 0.1.2 package, the code behind ndif.us) in its own venv,
on CPU, for one user: redis, an S3 object store (moto), a Ray head with ndif's controller
and one CPU model actor per model, and the API (gunicorn), all inside a network namespace
of their own (``netns.py``) whose API and object store reach the host's 127.0.0.1. The
pieces run each in its own session with a log under ``HOME/logs``; ``down`` stops them by
session and process group. The model actor and controller subclasses that replace ndif's
CUDA steps live in ``ndif_side/``, which only the server's venv imports. docs/remote.md,
"Run your own NDIF", says what runs and what it costs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import psutil

from bindscope.errors import NdifServerError
from bindscope.remote.server import environment, netns, processes
from bindscope.remote.server.models import SERVED, specs
from bindscope.remote.server.processes import Piece, listening

DEFAULT_PORT = 8001
NDIF_SIDE = Path(__file__).parent / "ndif_side"
# the order of start; down stops them last first
ORDER = ("netns", "forward-inside", "forward-outside", "redis", "object-store", "ray", "api")
INSIDE = ("redis", "object-store", "ray", "api")
STATE = "server.json"
CPU_ACTOR = "bindscope_ndif_cpu.CpuModelActor"
SANDBOXED_ACTOR = "bindscope_ndif_cpu.CpuSandboxModelActor"
# ndif_side's SANDBOX_KEY_ENV: the digest of the one key whose requests run sandboxed
SANDBOX_KEY_ENV = "BINDSCOPE_SANDBOX_KEY_SHA256"


def key_digest(key: str) -> str:
    """What the server keeps of a ``--sandbox-key`` (never the key itself)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one server, all derived from the API's."""

    api: int
    redis: int
    object_store: int
    ray: int
    ray_client: int
    dashboard: int

    @classmethod
    def of(cls, api: int) -> Ports:
        """The ports of the server whose API listens on ``api``."""
        return cls(api, api + 1000, api + 1001, api + 1002, api + 1003, api + 1004)


def host(port: int = DEFAULT_PORT) -> str:
    """The URL clients use (``NDIF_HOST``) for a server on ``port``."""
    return f"http://127.0.0.1:{port}"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _redis_server() -> str:
    """Debian's redis-server, installed with apt-get when missing and running as root."""
    found = shutil.which("redis-server")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        print("bindscope ndif: installing redis-server (apt-get)", file=sys.stderr)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "redis-server"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        found = shutil.which("redis-server")
    if found is None:
        raise NdifServerError(
            "bindscope ndif up needs redis-server for the queue; install it "
            "(sudo apt-get install redis-server) and retry"
        )
    return found


def _environment(
    home: Path,
    ports: Ports,
    hub_cache: Path,
    *,
    sandboxed: bool = False,
    sandbox_key_sha256: str = "",
) -> dict[str, str]:
    venv = home / "venv"
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("NDIF_", "RAY_"))}
    return {
        **keep,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(NDIF_SIDE),
        "VIRTUAL_ENV": str(venv),
        "NDIF_HOME": str(home),
        "NDIF_REDIS_URL": f"redis://127.0.0.1:{ports.redis}/",
        "NDIF_OBJECT_STORE_URL": f"http://127.0.0.1:{ports.object_store}",
        "NDIF_OBJECT_STORE_ACCESS_KEY": "bindscope-local",
        "NDIF_OBJECT_STORE_SECRET_KEY": "bindscope-local",
        "NDIF_RAY_ADDRESS": f"ray://127.0.0.1:{ports.ray_client}",
        "NDIF_RAY_HEAD_PORT": str(ports.ray),
        "NDIF_RAY_TEMP_DIR": str(home / "ray"),
        "NDIF_API_URL": host(ports.api),
        "NDIF_API_PORT": str(ports.api),
        "NDIF_DEFAULT_DTYPE": "float32",
        "NDIF_MODEL_IMPORT_PATH": CPU_ACTOR,
        "NDIF_CONTROLLER_IMPORT_PATH": "bindscope_ndif_cpu.CpuControllerActor",
        "GRPC_ENABLE_FORK_SUPPORT": "0",
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        # One thread per process: the server shares a small machine, and a local float32
        # run with the same thread count gives the same bits.
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        # the sandboxed actor keeps warm runner processes (~0.5 GB each, ndif's default 7
        # per model): one per model is enough for one user's sequential requests
        **({"NDIF_SANDBOX_POOL_SIZE": "1"} if sandboxed or sandbox_key_sha256 else {}),
        **({SANDBOX_KEY_ENV: sandbox_key_sha256} if sandbox_key_sha256 else {}),
    }


def _ray_command(home: Path, ports: Ports) -> list[str]:
    resources = {
        "head": 10,
        # ndif places models on GPUs; the CPU actor ignores the numbers but the
        # controller skips nodes without them.
        "cuda_memory_bytes": 2 * 8 * 1024**3,
        "cpu_memory_bytes": psutil.virtual_memory().total,
    }
    return [
        str(home / "venv" / "bin" / "ray"),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={ports.ray}",
        f"--ray-client-server-port={ports.ray_client}",
        "--num-cpus=4",
        "--num-gpus=2",
        f"--resources={json.dumps(resources)}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={ports.dashboard}",
        f"--temp-dir={home / 'ray'}",
        "--disable-usage-stats",
    ]


def _pieces(home: Path, ports: Ports, holder: int | None) -> list[Piece]:
    """The pieces, run in the namespace of ``holder`` (None: on the host, exposed)."""
    pieces = _server_pieces(home, ports, holder or "self")
    if holder is None:
        return pieces
    inside = [replace(p, command=netns.inside(holder, p.command)) for p in pieces]
    return [*netns.forwarders(home, holder, (ports.api, ports.object_store)), *inside]


def _server_pieces(home: Path, ports: Ports, where: int | str) -> list[Piece]:
    """Ndif's pieces; their ports are checked in the network namespace of process ``where``."""
    python = str(environment.venv_python(home / "venv"))
    bin_dir = home / "venv" / "bin"
    redis_server = shutil.which("redis-server") or "redis-server"
    redis = [redis_server, "--bind", "127.0.0.1", "--port", str(ports.redis)]
    return [
        Piece(
            "redis",
            [*redis, "--save", "", "--appendonly", "no", "--dir", str(home)],
            ready=lambda: listening(ports.redis, where),
        ),
        Piece(
            "object store",
            [str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(ports.object_store)],
            ready=lambda: listening(ports.object_store, where),
        ),
        Piece(
            "ray",
            _ray_command(home, ports),
            ready=lambda: all(
                listening(p, where) for p in (ports.ray, ports.ray_client, ports.dashboard)
            ),
            timeout=120,
        ),
        Piece(
            "controller",
            [python, "-m", "ndif.services.ray.deployments.controller.controller"],
            env={"RAY_ADDRESS": f"127.0.0.1:{ports.ray}"},
            timeout=120,
        ),
        Piece(
            "api",
            [
                str(bin_dir / "gunicorn"),
                "--config",
                "python:ndif.services.api.gunicorn_conf",
                "--bind",
                f"127.0.0.1:{ports.api}",
                "ndif.services.api.app:app",
            ],
            # /status answers once the API reaches Ray (/ping answers before)
            ready=lambda: _answers(f"{host(ports.api)}/status"),
            timeout=120,
        ),
    ]


def _serving(where: str) -> set[str]:
    """The repo ids the server's /status reports RUNNING."""
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
    """``server.json`` as ``up`` wrote it; None when there is none.

    Raises:
        NdifServerError: It is damaged (not JSON, or without its port and host).
    """
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
    """The server's ports, once no server runs from ``home`` and none of them is taken."""
    if running(home):
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
    home: Path,
    env: dict[str, str],
    models: Mapping[str, Path],
    hub_cache: Path,
    sandboxed: bool,
    holder: int | None = None,
) -> None:
    """Deploy ``models`` on the started pieces, each with the CPU (or sandboxed) actor."""
    actor = SANDBOXED_ACTOR if sandboxed or SANDBOX_KEY_ENV in env else CPU_ACTOR
    deploy = [{**spec, "actor_class": actor} for spec in specs(hub_cache, models, trusted=True)]
    spec_file = home / "deploy.json"
    spec_file.write_text(json.dumps(deploy))
    python = str(environment.venv_python(home / "venv"))
    command = [python, str(NDIF_SIDE / "bindscope_ndif_cpu.py"), "deploy", str(spec_file)]
    if holder is not None:
        command = netns.inside(holder, command)
    processes.start(home, Piece("deploy", command, timeout=600), env)


def _sandbox_digest(sandboxed: bool, sandbox_key: str | None) -> str:
    """The digest of ``--sandbox-key`` ("" without one), once the two modes are checked."""
    if sandbox_key is not None and not sandbox_key.strip():
        raise NdifServerError("--sandbox-key is empty: give the API key to run sandboxed")
    if sandboxed and sandbox_key:
        raise NdifServerError(
            "--sandboxed runs every request sandboxed and --sandbox-key only one key's: "
            "give one of them"
        )
    return key_digest(sandbox_key) if sandbox_key else ""


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

    Args:
        home: The server's folder (venv, logs, pid files, Ray's temp dir).
        models: Hub id -> a float32 safetensors folder, placed in ``hub_cache``.
        port: The API's port; the other pieces take ``port + 1000`` to ``port + 1004``.
        hub_cache: The Hugging Face hub cache the server (and a client here) loads from.
        sandboxed: Run every request untrusted, in the runner of ndif's sandboxed actor
            (``ndif_side/bindscope_ndif_cpu.py``, ``CpuSandboxDeployment``).
        sandbox_key: Run sandboxed only the requests sent with this API key, all others
            trusted (as ndif's key tags do with auth on); the server keeps its digest only.
        allow_exposed: Where no network namespace can be made, start anyway, Ray's ports
            on every interface (else refuse).

    Raises:
        NdifServerError: A piece did not start (which one, and its log); everything that
            did start is stopped again.
    """
    digest = _sandbox_digest(sandboxed, sandbox_key)
    processes.prepare_home(home)
    ports = _free_ports(home, port)
    env = _environment(home, ports, hub_cache, sandboxed=sandboxed, sandbox_key_sha256=digest)
    state: dict = {"port": port, "host": host(port), "models": []}
    (home / STATE).write_text(json.dumps(state))
    try:
        # first the namespace: a refusal comes before minutes of building
        holder = netns.start(home, env, allow_exposed=allow_exposed)
        state["netns"] = holder is not None
        (home / STATE).write_text(json.dumps(state))
        environment.build(home / "venv", home / "logs" / "venv.log")
        _redis_server()  # installed now if missing
        started = time.perf_counter()
        _start_and_deploy(home, env, ports, holder, models, hub_cache, sandboxed)
    except BaseException:
        down(home=home)
        raise
    state |= {"models": list(models), "sandboxed": sandboxed, "hub_cache": str(hub_cache)}
    state["sandbox_key_sha256"] = digest
    state["started_s"] = round(time.perf_counter() - started, 1)
    (home / STATE).write_text(json.dumps(state))
    return host(port)


def _start_and_deploy(
    home: Path,
    env: dict[str, str],
    ports: Ports,
    holder: int | None,
    models: Mapping[str, Path],
    hub_cache: Path,
    sandboxed: bool,
) -> None:
    """Start the pieces in order, deploy ``models``, wait until /status shows them."""
    for piece in _pieces(home, ports, holder):
        processes.start(home, piece, env)
    _deploy(home, env, models, hub_cache, sandboxed, holder)
    # /status is a cache the API refreshes now and then: wait until it shows the models
    _wait_serving(host(ports.api), list(models), home)


def _piece(home: Path, name: str) -> tuple[Piece, dict[str, str]]:
    state = _state(home)
    if state is None:
        raise NdifServerError(f"no local NDIF server runs from {home}; `bindscope ndif up` first")
    ports = Ports.of(state["port"])
    holder = netns.holder(home) if state.get("netns") else None
    found = {p.slug: p for p in _pieces(home, ports, holder) if p.ready is not None}
    if name not in found:
        raise NdifServerError(f"no piece {name!r}; the pieces are {', '.join(found)}")
    env = _environment(
        home,
        ports,
        Path(state["hub_cache"]),
        sandboxed=state["sandboxed"],
        sandbox_key_sha256=state.get("sandbox_key_sha256", ""),
    )
    return found[name], env


def stop_piece(*, home: Path, name: str) -> None:
    """Stop one piece of a running server (``api``: clients then find no server)."""
    piece, _ = _piece(home, name)
    processes.stop(home, [piece.slug], others=False)


def start_piece(*, home: Path, name: str) -> None:
    """Start again a piece that `stop_piece` stopped."""
    piece, env = _piece(home, name)
    processes.start(home, piece, env)


def running(home: Path) -> dict[str, list[psutil.Process]]:
    """The live processes of each started piece (an empty dict: nothing runs).

    Only processes proven to be the pieces count; stale pid files are removed.
    """
    return {k: v for k, v in processes.running(home).items() if v} if home.is_dir() else {}


def down(*, home: Path) -> tuple[list[str], list[str]]:
    """Stop every piece ``up`` started (TERM, then KILL after 10 s).

    Returns:
        The pieces stopped, and a note per stale pid file removed (never signalled).

    Raises:
        NdifServerError: ``home`` cannot be read or written, or a pid file is damaged.
    """
    try:
        stopped, stale = processes.stop(home, ORDER) if home.is_dir() else ([], [])
        netns.remove_sockets(home)
        (home / STATE).unlink(missing_ok=True)
    except OSError as error:
        raise NdifServerError(
            f"--home {home}: {error.strerror} ({error.filename}); give the folder the "
            "server was started with"
        ) from None
    return stopped, stale


def _checked(home: Path, state: dict) -> list[Piece]:
    """The pieces ``state`` says run, each with the check that it is ready."""
    if not state.get("netns"):
        return _pieces(home, Ports.of(state["port"]), None)
    found, _ = processes.leaders(home)
    # the holder, or any piece started inside: the namespace whose ports are read
    inside = [found[s] for s in (netns.HOLDER, *INSIDE) if s in found]
    holder = inside[0] if inside else -1
    return [netns.holder_piece(home), *_pieces(home, Ports.of(state["port"]), holder)]


def status(*, home: Path) -> dict:
    """Each piece's process count, the pieces dead (and why), the stale pid files removed.

    A piece is dead when its process is gone or its port does not listen (the API: its
    ``/status`` does not answer).
    """
    state = _state(home)
    _, stale = processes.leaders(home) if home.is_dir() else ({}, [])
    if state is None:
        return {"pieces": {}, "dead": {}, "stale": stale, "api_answers": False}
    alive = running(home)
    dead = {}
    for piece in _checked(home, state):
        if piece.ready is None:
            continue
        if piece.slug not in alive:
            dead[piece.slug] = "no process"
        elif not piece.ready():
            dead[piece.slug] = "runs, but does not answer (its port; the API: /status)"
    pieces = {name: len(members) for name, members in alive.items()}
    answers = _answers(f"{state['host']}/ping")
    return {**state, "pieces": pieces, "dead": dead, "stale": stale, "api_answers": answers}


__all__ = [
    "DEFAULT_PORT",
    "SERVED",
    "Ports",
    "down",
    "host",
    "running",
    "start_piece",
    "status",
    "stop_piece",
    "up",
]
