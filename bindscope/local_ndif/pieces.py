"""What the local NDIF server runs: its ports, environment, commands and deploy specs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from bindscope.errors import NdifServerError
from bindscope.local_ndif import netns
from bindscope.local_ndif.processes import Piece, listening

DEFAULT_PORT = 8001
NDIF_SIDE = Path(__file__).parent / "ndif_side"
# the order of start; down stops them last first
ORDER = ("netns", "forward-inside", "forward-outside", "redis", "object-store", "ray", "api")
INSIDE = ("redis", "object-store", "ray", "api")
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


def venv_python(venv: Path) -> Path:
    """The venv's interpreter."""
    return venv / "bin" / "python"


def host(port: int = DEFAULT_PORT) -> str:
    """The URL clients use (``NDIF_HOST``) for a server on ``port``."""
    return f"http://127.0.0.1:{port}"


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def redis_server() -> str:
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


def server_environment(home: Path, state: Mapping) -> dict[str, str]:
    """The environment every piece runs in (for ``server.json``'s ``state``): ndif's settings."""
    venv = home / "venv"
    ports = Ports.of(state["port"])
    sandboxed, sandbox_key_sha256 = state["sandboxed"], state.get("sandbox_key_sha256", "")
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
        "HF_HUB_CACHE": state["hub_cache"],
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
    """Ray's head node, with the resources ndif's controller looks for."""
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


def pieces(home: Path, ports: Ports, holder: int | None) -> list[Piece]:
    """The pieces, run in the namespace of ``holder`` (None: on the host, exposed)."""
    ndif = _server_pieces(home, ports, holder or "self")
    if holder is None:
        return ndif
    inside = [replace(p, command=netns.inside(holder, p.command)) for p in ndif]
    return [*netns.forwarders(home, holder, (ports.api, ports.object_store)), *inside]


def _server_pieces(home: Path, ports: Ports, where: int | str) -> list[Piece]:
    python = str(venv_python(home / "venv"))
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
            ready=lambda: answers(f"{host(ports.api)}/status"),
            timeout=120,
        ),
    ]


def place(hub_cache: Path, repo_id: str, folder: Path) -> Path:
    """Link ``folder``'s files as ``repo_id``'s snapshot in ``hub_cache``; the snapshot.

    A repo already in the cache that is not ours (a real download) is left alone.
    """
    root = hub_cache / ("models--" + repo_id.replace("/", "--"))  # the Hub cache's layout
    revision = hashlib.sha1(f"bindscope:{folder.resolve()}".encode()).hexdigest()
    snapshot = root / "snapshots" / revision
    ref = root / "refs" / "main"
    if ref.is_file() and ref.read_text().strip() != revision:
        return root / "snapshots" / ref.read_text().strip()
    snapshot.mkdir(parents=True, exist_ok=True)
    for source in folder.iterdir():
        if source.is_file():
            link = snapshot / source.name
            link.unlink(missing_ok=True)
            link.symlink_to(source.resolve())
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(revision)
    return snapshot


def specs(hub_cache: Path, folders: Mapping[str, Path], *, trusted: bool) -> list[dict]:
    """Ndif deploy specs: float32 (the server's default is bfloat16), sized from the files."""
    snapshots = {repo_id: place(hub_cache, repo_id, folder) for repo_id, folder in folders.items()}
    return [
        {
            "checkpoint": repo_id,
            "dtype": "float32",
            "size_bytes": sum(p.stat().st_size for p in snapshot.glob("*.safetensors")),
            "trusted": trusted,
            "pinned": True,
        }
        for repo_id, snapshot in snapshots.items()
    ]
