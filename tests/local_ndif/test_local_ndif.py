"""``bindscope ndif``'s machinery without the server: pieces, failures, stop, the model layout.

The server itself is tested by the live layer (tests/remote/live, ``make test-live``).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys

import grimp
import psutil
import pytest

from bindscope import local_ndif as server
from bindscope.cli import main
from bindscope.errors import NdifServerError
from bindscope.local_ndif import pieces, processes, supervisor
from bindscope.local_ndif.pieces import key_digest, place, specs
from bindscope.local_ndif.processes import Piece
from bindscope.local_ndif.supervisor import STATE

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
    leader = processes.read_record(tmp_path / "run" / "api.pid").pid
    assert not psutil.pid_exists(leader) or psutil.Process(leader).status() == "zombie"


def test_stop_leaves_no_process_of_the_session(tmp_path):
    spawn = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    processes.start(tmp_path, Piece("ray", [PYTHON, "-c", spawn], ready=lambda: True), {})
    members = processes.running(tmp_path)["ray"]
    assert members  # the leader (and, once it ran, its sleeping child)
    assert processes.stop(tmp_path, ["ray"]) == (["ray"], [])
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
    assert not supervisor.ready(tmp_path)
    (tmp_path / supervisor.STAMP).write_text("torch==2.12.0\n")
    assert not supervisor.ready(tmp_path)  # other pins: rebuilt


def test_a_sandbox_key_deploys_the_sandboxed_actor_and_keeps_only_its_digest(tmp_path, monkeypatch):
    """``--sandbox-key``: both modes from one server; the key itself is written nowhere."""
    key = "bindscope-untrusted-0123"
    trusted = {"port": 8001, "hub_cache": str(tmp_path / "hub"), "sandboxed": False}
    env = pieces.server_environment(tmp_path, {**trusted, "sandbox_key_sha256": key_digest(key)})
    assert env[pieces.SANDBOX_KEY_ENV] == key_digest(key) != key
    assert key not in "".join(env.values())
    started = []
    monkeypatch.setattr(processes, "start", lambda home, piece, env: started.append(piece))
    for environment_, actor in (
        (env, pieces.SANDBOXED_ACTOR),
        (pieces.server_environment(tmp_path, trusted), pieces.CPU_ACTOR),
    ):
        (tmp_path / "m").mkdir(exist_ok=True)
        supervisor._deploy(tmp_path, environment_, {"org/m": tmp_path / "m"}, trusted, None)
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


@pytest.fixture
def stranger():
    """A process of someone else's that leads its own session, as a server piece would."""
    process = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def _pid_file(home, slug, text):
    (home / "run").mkdir(parents=True, exist_ok=True)
    (home / "run" / f"{slug}.pid").write_text(text)
    (home / STATE).write_text(json.dumps({"port": 8001, "host": server.host(8001)}))


def test_a_stale_pid_file_is_reported_and_removed_never_signalled(tmp_path, stranger, capsys):
    """The pid is another process now (its start time differs): not counted, not killed."""
    created = psutil.Process(stranger.pid).create_time()
    # what `up` wrote for a redis whose pid the stranger took after it died
    record = {"pid": stranger.pid, "create_time": created - 5.0, "command": ["redis-server"]}
    _pid_file(tmp_path, "redis", json.dumps(record))
    assert main(["ndif", "status", "--home", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert '"redis": 1' not in out and "stale pid file" in err and "redis" in err
    assert not (tmp_path / "run" / "redis.pid").exists()
    _pid_file(tmp_path, "redis", json.dumps(record))
    assert main(["ndif", "down", "--home", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "nothing was running" in out and "nothing was signalled" in err
    assert stranger.poll() is None  # alive
    assert not (tmp_path / "run" / "redis.pid").exists()


def test_a_bare_pid_of_another_folder_is_stale_and_never_signalled(tmp_path, stranger, capsys):
    """What bindscope wrote before pid records: proven only by a session leader in HOME."""
    _pid_file(tmp_path, "redis", str(stranger.pid))
    assert main(["ndif", "down", "--home", str(tmp_path)]) == 0
    assert "nothing was signalled" in capsys.readouterr().err
    assert stranger.poll() is None and not (tmp_path / "run" / "redis.pid").exists()
    ours = subprocess.Popen(["sleep", "120"], cwd=tmp_path, start_new_session=True)
    _pid_file(tmp_path, "redis", str(ours.pid))  # a piece an older bindscope started here
    assert main(["ndif", "down", "--home", str(tmp_path)]) == 0
    assert "stopped: redis" in capsys.readouterr().out
    assert ours.wait(timeout=15) is not None


@pytest.mark.parametrize("text", ["not a pid", '{"pid": 1}', "[1, 2]"])
def test_a_damaged_pid_file_is_a_clear_error_and_nothing_is_signalled(tmp_path, capsys, text):
    _pid_file(tmp_path, "redis", text)
    for action in ("status", "down", "up"):
        assert main(["ndif", action, "--home", str(tmp_path), "--port", "8801"]) == 2
        err = capsys.readouterr().err
        assert str(tmp_path / "run" / "redis.pid") in err and "Traceback" not in err


# A stand-in for one piece: `http PORT` answers 200 to every GET; `tcp PORT...` listens on
# 127.0.0.1, `wide PORT...` on every interface.
FAKE_PIECE = """
import http.server, socket, sys
kind, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
if kind == "http":
    http.server.HTTPServer(("127.0.0.1", ports[0]), Ok).serve_forever()
host = "0.0.0.0" if kind == "wide" else "127.0.0.1"  # wide: as Ray's own services bind
sockets = [socket.create_server((host, p)) for p in ports]
__import__("time").sleep(600)
"""


def _free_api_port() -> int:
    """A port P with P and P+1000..P+1004 free on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        ports = server.Ports.of(port)
        if port < 60000 and not any(processes.listening(p) for p in vars(ports).values()):
            return port
    raise AssertionError("no free ports")


def _fake_server(home, port):
    ports = server.Ports.of(port)
    script = home / "fake_piece.py"
    script.write_text(FAKE_PIECE)
    for name, kind, numbers in (
        ("redis", "tcp", [ports.redis]),
        ("object store", "tcp", [ports.object_store]),
        ("ray", "tcp", [ports.ray, ports.ray_client, ports.dashboard]),
        ("api", "http", [ports.api]),
    ):
        command = [PYTHON, str(script), kind, *map(str, numbers)]
        ready = lambda numbers=numbers: all(processes.listening(p) for p in numbers)  # noqa: E731
        processes.start(home, Piece(name, command, ready=ready), {})
    state = {"port": port, "host": server.host(port), "netns": False, "models": []}
    (home / STATE).write_text(json.dumps(state))


def test_status_names_a_dead_piece_and_exits_non_zero(tmp_path, capsys):
    """Redis killed: the API still answers /ping, but status must not call it well."""
    _fake_server(tmp_path, _free_api_port())
    try:
        assert main(["ndif", "status", "--home", str(tmp_path)]) == 0
        assert '"dead": {}' in capsys.readouterr().out
        redis = processes.read_record(tmp_path / "run" / "redis.pid").pid
        psutil.Process(redis).kill()
        psutil.Process(redis).wait(10)
        assert main(["ndif", "status", "--home", str(tmp_path)]) == 1
        out, err = capsys.readouterr()
        assert json.loads(out)["api_answers"] is True  # what fooled status before
        assert json.loads(out)["dead"] == {"redis": "no process"}
        assert "redis is dead" in err
    finally:
        server.down(home=tmp_path)


def _refused(argv, capsys, *expected):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(e in err for e in expected), err


def test_a_home_that_cannot_be_written_is_a_clear_error(tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for home, why in ((a_file / "ndif", "Not a directory"), ("/proc/bindscope-x", "/proc")):
        _refused(["ndif", "up", "--home", str(home), "--port", "8801"], capsys, "--home", why)
    _refused(["ndif", "down", "--home", str(a_file / "ndif")], capsys, "--home", "Not a directory")


def test_a_read_only_home_is_a_clear_error(tmp_path):
    """A read-only mount (tmpfs, in a user + mount namespace of this test's own)."""
    home = tmp_path / "ro"
    home.mkdir()
    cli = "import sys; from bindscope.cli import main; sys.exit(main(sys.argv[1:]))"
    mount = f"mount -t tmpfs -o ro none {home}"
    run = f"{mount} && exec {PYTHON} -c '{cli}' ndif up --home {home} --port 8801"
    unshare = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", run]
    done = subprocess.run(unshare, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Read-only file system" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("text", ["{not json", "[]", '{"port": "8001"}'])
def test_a_damaged_server_json_is_a_clear_error(tmp_path, capsys, text):
    (tmp_path / STATE).write_text(text)
    _refused(["ndif", "status", "--home", str(tmp_path)], capsys, str(tmp_path / STATE))
    with pytest.raises(NdifServerError, match="damaged"):
        server.start_piece(home=tmp_path, name="api")


def test_the_launcher_is_apart_from_the_client_and_only_the_cli_imports_it():
    """issue 42: the local server's launcher is its own package, not part of ``remote``."""
    graph = grimp.build_graph("bindscope")
    inside = graph.find_descendants("bindscope.local_ndif") | {"bindscope.local_ndif"}
    users = {
        user
        for module in inside
        for user in graph.find_modules_that_directly_import(module)
        if user not in inside
    }
    assert users == {"bindscope.cli.ndif"}
    assert importlib.util.find_spec("bindscope.remote.server") is None
