"""A local NDIF server for one user: ``bindscope ndif up`` / ``down`` / ``status``.

The real server (the ``ndif`` 0.1.2 package) in its own venv, on CPU, inside a network
namespace (``netns.py``) that reaches only the host's 127.0.0.1: ``pieces.py`` says what runs,
``supervisor.py`` starts, checks and stops it. ``ndif_side/`` runs only inside the server's
venv, never in bindscope's. docs/remote.md, "Run your own NDIF", says what it costs.
"""

from __future__ import annotations

from bindscope.local_ndif.pieces import DEFAULT_PORT, Ports, host, key_digest
from bindscope.local_ndif.supervisor import down, running, start_piece, status, stop_piece, up

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
