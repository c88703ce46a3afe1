"""The local server itself: what runs, and on which addresses it listens."""

from __future__ import annotations

import ipaddress

import psutil
import pytest

from bindscope.remote import server
from tests.remote.live.conftest import HOME

pytestmark = pytest.mark.ndif_live

# Ray's own services bind wider than loopback whatever --node-ip-address says (docs/remote.md,
# "Run your own NDIF"): its GCS, raylet, workers' gRPC servers, the dashboard agent and the
# client proxy listen on all interfaces or the machine's address.
WIDER = {"ray"}


def _listening(processes: list[psutil.Process]) -> set[tuple[str, int]]:
    found = set()
    for process in processes:
        try:
            connections = process.net_connections(kind="inet")
        except psutil.Error:
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN}
    return found


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_every_piece_runs_and_listens_on_loopback_except_ray(live):
    pieces = server.running(HOME)
    assert set(pieces) == {"redis", "object-store", "ray", "api"}
    state = server.status(home=HOME)
    assert state["api_answers"] and state["host"] == live
    for name, processes in pieces.items():
        wide = {a for a in _listening(processes) if not _loopback(a[0])}
        if name in WIDER:
            continue
        assert not wide, f"{name} listens beyond loopback: {sorted(wide)}"
    # the ports clients and the server's own pieces use are all on loopback
    ports = server.Ports.of(int(live.rsplit(":", 1)[1]))
    for name, port in (
        ("api", ports.api),
        ("redis", ports.redis),
        ("object-store", ports.object_store),
    ):
        addresses = {ip for ip, p in _listening(pieces[name]) if p == port}
        assert addresses and all(_loopback(ip) for ip in addresses), (name, addresses)
