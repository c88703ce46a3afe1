"""The local server itself: what runs, and that nothing of it listens beyond loopback."""

from __future__ import annotations

import ipaddress
import os

import psutil
import pytest

from bindscope import local_ndif as server
from bindscope.local_ndif import processes
from tests.remote.live.conftest import HOME

pytestmark = pytest.mark.ndif_live

PIECES = {"netns", "forward-inside", "forward-outside", "redis", "object-store", "ray", "api"}


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _namespace(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def test_every_piece_runs_and_only_loopback_listens_here(live):
    pieces = server.running(HOME)
    assert set(pieces) == PIECES
    state = server.status(home=HOME)
    assert state["api_answers"] and state["host"] == live and not state["dead"], state
    pids = {p.pid for members in pieces.values() for p in members}
    # this (the host's) network namespace: every socket any piece listens on
    here = [c for c in psutil.net_connections(kind="inet") if c.pid in pids]
    listen = {(c.laddr.ip, c.laddr.port) for c in here if c.status == psutil.CONN_LISTEN}
    wide = {a for a in listen if not _loopback(a[0])}
    assert not wide, f"the server listens beyond loopback: {sorted(wide)}"
    # only the forwarder listens here, on the API's and the object store's ports
    ports = server.Ports.of(state["port"])
    assert {p for _, p in listen} == {ports.api, ports.object_store}, listen
    owners = {c.pid for c in here if c.status == psutil.CONN_LISTEN}
    assert owners <= {p.pid for p in pieces["forward-outside"]}
    # every other piece runs in the server's own network namespace, where Ray's
    # all-interface sockets meet only a loopback device
    ours = _namespace("self")
    for name, members in pieces.items():
        if name != "forward-outside":
            assert all(_namespace(p.pid) != ours for p in members if p.is_running()), name
    holder = pieces["netns"][0].pid
    for port in (ports.redis, ports.object_store, ports.ray, ports.ray_client, ports.api):
        assert processes.listening(port, holder), port
