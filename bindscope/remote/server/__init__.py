"""A local NDIF server: ``bindscope ndif up`` / ``down`` / ``status``.

The real server (the ``ndif`` 0.1.2 package, the code behind ndif.us) in its own venv,
on CPU, on 127.0.0.1, for one user: redis, an S3 object store (moto), a Ray head with
ndif's controller and one CPU model actor per model, and the API (gunicorn). The pieces
run each in its own session with a log under ``HOME/logs``; ``down`` stops them by
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
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from bindscope.errors import NdifServerError
from bindscope.remote.server import environment, processes
from bindscope.remote.server.models import SERVED, specs
from bindscope.remote.server.processes import Piece, listening

DEFAULT_PORT = 8001
NDIF_SIDE = Path(__file__).parent / "ndif_side"
ORDER = ("redis", "object-store", "ray", "api")
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
    home: Path, ports: Ports, hub_cache: Path, *, sandboxed: bool = False, sandbox_key: str = ""
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
        **({"NDIF_SANDBOX_POOL_SIZE": "1"} if sandboxed or sandbox_key else {}),
        **({SANDBOX_KEY_ENV: sandbox_key} if sandbox_key else {}),
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


def _pieces(home: Path, ports: Ports) -> list[Piece]:
    python = str(environment.venv_python(home / "venv"))
    bin_dir = home / "venv" / "bin"
    redis = [_redis_server(), "--bind", "127.0.0.1", "--port", str(ports.redis)]
    return [
        Piece(
            "redis",
            [*redis, "--save", "", "--appendonly", "no", "--dir", str(home)],
            ready=lambda: listening(ports.redis),
        ),
        Piece(
            "object store",
            [str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(ports.object_store)],
            ready=lambda: listening(ports.object_store),
        ),
        Piece(
            "ray",
            _ray_command(home, ports),
            ready=lambda: listening(ports.ray_client) and listening(ports.dashboard),
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
    path = home / STATE
    return json.loads(path.read_text()) if path.is_file() else None


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
    home: Path, env: dict[str, str], models: Mapping[str, Path], hub_cache: Path, sandboxed: bool
) -> None:
    """Deploy ``models`` on the started pieces, each with the CPU (or sandboxed) actor."""
    actor = SANDBOXED_ACTOR if sandboxed or SANDBOX_KEY_ENV in env else CPU_ACTOR
    deploy = [{**spec, "actor_class": actor} for spec in specs(hub_cache, models, trusted=True)]
    spec_file = home / "deploy.json"
    spec_file.write_text(json.dumps(deploy))
    python = str(environment.venv_python(home / "venv"))
    command = [python, str(NDIF_SIDE / "bindscope_ndif_cpu.py"), "deploy", str(spec_file)]
    processes.start(home, Piece("deploy", command, timeout=600), env)


def up(
    *,
    home: Path,
    models: Mapping[str, Path],
    port: int = DEFAULT_PORT,
    hub_cache: Path,
    sandboxed: bool = False,
    sandbox_key: str | None = None,
) -> str:
    """Build the venv once, start every piece, deploy ``models``; the host to use.

    Args:
        home: The server's folder (venv, logs, pid files, Ray's temp dir).
        models: Hub id -> a float32 safetensors folder, placed in ``hub_cache``.
        port: The API's port; the other pieces take ``port + 1000`` to ``port + 1004``.
        hub_cache: The Hugging Face hub cache the server loads from (and a client on this
            machine reads the same configs and tokenizers from).
        sandboxed: Deploy ndif's sandboxed actor and run every request untrusted, in its
            runner process (``ndif_side/bindscope_ndif_cpu.py``, ``CpuSandboxDeployment``).
        sandbox_key: Run sandboxed only the requests sent with this API key, every other
            request trusted: both modes from one server, as ndif's key tags give with auth
            on. The server keeps only the key's digest.

    Raises:
        NdifServerError: A piece did not start (which one, and its log); everything that
            did start is stopped again.
    """
    if sandbox_key is not None and not sandbox_key.strip():
        raise NdifServerError("--sandbox-key is empty: give the API key to run sandboxed")
    if sandboxed and sandbox_key:
        raise NdifServerError(
            "--sandboxed runs every request sandboxed and --sandbox-key only one key's: "
            "give one of them"
        )
    digest = key_digest(sandbox_key) if sandbox_key else ""
    home.mkdir(parents=True, exist_ok=True)
    ports = _free_ports(home, port)
    environment.build(home / "venv", home / "logs" / "venv.log")
    env = _environment(home, ports, hub_cache, sandboxed=sandboxed, sandbox_key=digest)
    started = time.perf_counter()
    state = {"port": port, "host": host(port), "models": []}
    (home / STATE).write_text(json.dumps(state))
    try:
        for piece in _pieces(home, ports):
            processes.start(home, piece, env)
        _deploy(home, env, models, hub_cache, sandboxed)
        # /status is a cache the API refreshes now and then: wait until it shows the models
        _wait_serving(host(port), list(models), home)
    except BaseException:
        processes.stop(home, ORDER)
        (home / STATE).unlink(missing_ok=True)
        raise
    state |= {"models": list(models), "sandboxed": sandboxed, "hub_cache": str(hub_cache)}
    state["sandbox_key_sha256"] = digest
    state["started_s"] = round(time.perf_counter() - started, 1)
    (home / STATE).write_text(json.dumps(state))
    return host(port)


def _piece(home: Path, name: str) -> tuple[Piece, dict[str, str]]:
    state = _state(home)
    if state is None:
        raise NdifServerError(f"no local NDIF server runs from {home}; `bindscope ndif up` first")
    ports = Ports.of(state["port"])
    found = {p.slug: p for p in _pieces(home, ports) if p.ready is not None}
    if name not in found:
        raise NdifServerError(f"no piece {name!r}; the pieces are {', '.join(found)}")
    env = _environment(
        home,
        ports,
        Path(state["hub_cache"]),
        sandboxed=state["sandboxed"],
        sandbox_key=state.get("sandbox_key_sha256", ""),
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
    """The live processes of each started piece (an empty dict: nothing runs)."""
    return {k: v for k, v in processes.running(home).items() if v} if home.is_dir() else {}


def down(*, home: Path) -> list[str]:
    """Stop every piece ``up`` started (TERM, then KILL after 10 s); the pieces stopped."""
    stopped = processes.stop(home, ORDER) if home.is_dir() else []
    (home / STATE).unlink(missing_ok=True)
    return stopped


def status(*, home: Path) -> dict:
    """What runs: each piece's process count, the host, whether the API answers."""
    state = _state(home) or {}
    pieces = {name: len(members) for name, members in running(home).items()}
    answers = bool(state) and _answers(f"{state['host']}/ping")
    return {**state, "pieces": pieces, "api_answers": answers}


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
