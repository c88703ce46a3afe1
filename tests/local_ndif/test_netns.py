"""``bindscope ndif up``'s network namespace, with stand-in pieces: only loopback is reached.

Needs unprivileged user namespaces (``unshare --user --net``), as ``up`` does by default.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.request

import psutil
import pytest

from bindscope import local_ndif as server
from bindscope.errors import NdifServerError
from bindscope.local_ndif import netns, processes
from bindscope.local_ndif.processes import Piece
from bindscope.local_ndif.supervisor import STATE
from tests.local_ndif.test_local_ndif import FAKE_PIECE, PYTHON, _free_api_port


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def _inside(home, holder, name, kind, port):
    script = home / "fake_piece.py"
    script.write_text(FAKE_PIECE)
    command = netns.inside(holder, [PYTHON, str(script), kind, str(port)])
    return Piece(name, command, ready=lambda: processes.listening(port, holder))


def test_pieces_in_the_namespace_reach_the_host_only_through_loopback(tmp_path):
    ports = server.Ports.of(_free_api_port())
    holder = netns.start(tmp_path, dict(os.environ), allow_exposed=False)
    assert holder is not None
    try:
        for piece in (
            *netns.forwarders(tmp_path, holder, (ports.api, ports.object_store)),
            _inside(tmp_path, holder, "api", "http", ports.api),
            _inside(tmp_path, holder, "object store", "http", ports.object_store),
            _inside(tmp_path, holder, "ray", "wide", ports.ray),  # binds 0.0.0.0, as Ray does
        ):
            processes.start(tmp_path, piece, {})
        for port in (ports.api, ports.object_store):  # reached from here, through the forwarders
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as answer:
                assert answer.status == 200
        pids = {p.pid for members in processes.running(tmp_path).values() for p in members}
        here = [c for c in psutil.net_connections("inet") if c.pid in pids]
        listen = {(c.laddr.ip, c.laddr.port) for c in here if c.status == psutil.CONN_LISTEN}
        # the host sees only the outside forwarder, on loopback; Ray's wide socket stays inside
        assert {p for _, p in listen} == {ports.api, ports.object_store}, listen
        assert all(_loopback(ip) for ip, _ in listen), listen
        assert processes.listening(ports.ray, holder) and not processes.listening(ports.ray)
    finally:
        stopped, _ = server.down(home=tmp_path)
    assert {"netns", "forward-inside", "forward-outside", "api", "ray"} <= set(stopped)
    assert not any(psutil.pid_exists(pid) for pid in pids | {holder})
    assert not list((tmp_path / "run").glob("*.sock"))


def _no_unshare(monkeypatch):
    which = netns.shutil.which
    monkeypatch.setattr(netns.shutil, "which", lambda t: None if t == "unshare" else which(t))


def test_without_a_namespace_up_refuses_unless_the_exposure_is_accepted(
    tmp_path, monkeypatch, capsys
):
    _no_unshare(monkeypatch)
    with pytest.raises(NdifServerError, match="unshare not found") as error:
        netns.start(tmp_path, {}, allow_exposed=False)
    assert netns.EXPOSED_FLAG in str(error.value) and "Ray's ports" in str(error.value)
    assert netns.start(tmp_path, {}, allow_exposed=True) is None
    assert "exposed" in capsys.readouterr().err


def test_a_failing_unshare_is_named_and_refused(tmp_path, monkeypatch):
    refused = [PYTHON, "-c", "raise SystemExit('unshare: unshare failed: Operation not permitted')"]
    monkeypatch.setattr(netns, "holder_piece", lambda home: Piece("netns", refused, lambda: False))
    with pytest.raises(NdifServerError, match="Operation not permitted") as error:
        netns.start(tmp_path, {}, allow_exposed=False)
    assert netns.EXPOSED_FLAG in str(error.value)
    assert processes.running(tmp_path) == {}


def test_up_refuses_before_building_when_no_namespace_can_be_made(tmp_path, monkeypatch):
    """The refusal comes before the venv build and before anything starts."""
    _no_unshare(monkeypatch)
    with pytest.raises(NdifServerError, match=netns.EXPOSED_FLAG):
        server.up(home=tmp_path, models={}, port=_free_api_port(), hub_cache=tmp_path / "hub")
    assert not (tmp_path / STATE).exists() and not (tmp_path / "venv").exists()
