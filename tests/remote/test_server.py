"""``bindscope ndif``'s machinery without the server: pieces, failures, stop, the model layout.

The server itself is tested by the live layer (tests/remote/live, ``make test-live``).
"""

from __future__ import annotations

import json
import socket
import sys

import psutil
import pytest

from bindscope.cli import main
from bindscope.errors import NdifServerError
from bindscope.remote import server
from bindscope.remote.server import environment, processes
from bindscope.remote.server.models import place, specs
from bindscope.remote.server.processes import Piece

PYTHON = sys.executable


def test_a_piece_that_exits_names_itself_and_its_log(tmp_path):
    piece = Piece(
        "object store",
        [PYTHON, "-c", "print('no bucket'); raise SystemExit(3)"],
        ready=lambda: False,
        timeout=20,
    )
    with pytest.raises(NdifServerError) as error:
        processes.start(tmp_path, piece, {})
    message = str(error.value)
    assert "'object store' exited with status 3" in message
    assert str(tmp_path / "logs" / "object-store.log") in message and "no bucket" in message


def test_a_piece_never_ready_is_stopped_and_named(tmp_path):
    piece = Piece(
        "api", [PYTHON, "-c", "import time; time.sleep(60)"], ready=lambda: False, timeout=1
    )
    with pytest.raises(NdifServerError, match=r"'api' not ready in 1 s"):
        processes.start(tmp_path, piece, {})
    leader = int((tmp_path / "run" / "api.pid").read_text())
    assert not psutil.pid_exists(leader) or psutil.Process(leader).status() == "zombie"


def test_stop_leaves_no_process_of_the_session(tmp_path):
    spawn = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    processes.start(tmp_path, Piece("ray", [PYTHON, "-c", spawn], ready=lambda: True), {})
    members = processes.running(tmp_path)["ray"]
    assert members  # the leader (and, once it ran, its sleeping child)
    assert processes.stop(tmp_path, ["ray"]) == ["ray"]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in members)
    assert processes.running(tmp_path) == {}


def test_up_refuses_busy_ports_before_building_anything(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(NdifServerError, match=rf"ports \[{port}\] .* in use"):
            server.up(home=tmp_path, models={}, port=port, hub_cache=tmp_path / "hub")
    assert not (tmp_path / "venv").exists()


def test_cli_checks_the_port_and_says_what_runs(tmp_path, capsys):
    assert main(["ndif", "up", "--port", "80", "--home", str(tmp_path)]) == 2
    assert "--port 80" in capsys.readouterr().err
    assert main(["ndif", "status", "--home", str(tmp_path)]) == 1  # nothing answers
    assert '"api_answers": false' in capsys.readouterr().out
    assert main(["ndif", "down", "--home", str(tmp_path)]) == 0
    assert "nothing was running" in capsys.readouterr().out


def test_models_take_the_hub_cache_layout_and_leave_real_downloads_alone(tmp_path):
    folder = tmp_path / "converted"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"0" * 128)
    hub = tmp_path / "hub"
    (spec,) = specs(hub, {"org/model": folder}, trusted=True)
    root = hub / "models--org--model"
    snapshot = root / "snapshots" / (root / "refs" / "main").read_text()
    assert (snapshot / "config.json").resolve() == (folder / "config.json").resolve()
    assert spec == {
        "checkpoint": "org/model",
        "dtype": "float32",
        "size_bytes": 128,
        "trusted": True,
        "pinned": True,
    }
    (root / "refs" / "main").write_text("f" * 40)  # someone's real download
    assert place(hub, "org/model", folder) == root / "snapshots" / ("f" * 40)


def test_the_venv_stamp_names_its_pins(tmp_path):
    assert not environment.ready(tmp_path)
    (tmp_path / environment.STAMP).write_text("torch==2.12.0\n")
    assert not environment.ready(tmp_path)  # other pins: rebuilt


def test_a_sandbox_key_deploys_the_sandboxed_actor_and_keeps_only_its_digest(tmp_path, monkeypatch):
    """``--sandbox-key``: both modes from one server; the key itself is written nowhere."""
    ports = server.Ports.of(8001)
    key = "bindscope-untrusted-0123"
    env = server._environment(tmp_path, ports, tmp_path / "hub", sandbox_key=server.key_digest(key))
    assert env[server.SANDBOX_KEY_ENV] == server.key_digest(key) != key
    assert key not in "".join(env.values())
    started = []
    monkeypatch.setattr(server.processes, "start", lambda home, piece, env: started.append(piece))
    for environment_, actor in (
        (env, server.SANDBOXED_ACTOR),
        (server._environment(tmp_path, ports, tmp_path / "hub"), server.CPU_ACTOR),
    ):
        (tmp_path / "m").mkdir(exist_ok=True)
        server._deploy(tmp_path, environment_, {"org/m": tmp_path / "m"}, tmp_path / "hub", False)
        deployed = json.loads((tmp_path / "deploy.json").read_text())
        assert [d["actor_class"] for d in deployed] == [actor]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"sandboxed": True, "sandbox_key": "k"}, "give one of them"),
        ({"sandbox_key": " "}, "--sandbox-key is empty"),
    ],
)
def test_up_refuses_two_modes_or_an_empty_key_before_building(tmp_path, options, message):
    with pytest.raises(NdifServerError, match=message):
        server.up(home=tmp_path, models={}, hub_cache=tmp_path / "hub", **options)
    assert not (tmp_path / "venv").exists()
