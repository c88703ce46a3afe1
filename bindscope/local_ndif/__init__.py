"""A local NDIF server for one user (``bindscope ndif up|down|status``; docs/remote.md)."""

from __future__ import annotations

from bindscope.local_ndif.pieces import DEFAULT_PORT, Ports, host, key_digest
from bindscope.local_ndif.processes import running
from bindscope.local_ndif.supervisor import down, start_piece, status, stop_piece, up

__all__ = [
    "DEFAULT_PORT",
    "Ports",
    "down",
    "host",
    "key_digest",
    "running",
    "start_piece",
    "status",
    "stop_piece",
    "up",
]
