"""Run bindscope on NDIF: a model without weights here, its forward passes on NDIF's GPUs.

``bindscope.load_model("org/model", remote=True)`` checks the backend (API key, host,
versions, whether the model is served), builds the model on the meta device and routes
every trace, generation and session through `NdifBackend`. ``remote="local"`` loads the
weights here and routes the same requests through `SimulatedServer`, which does what the
server does (unpickle with NDIF's module whitelist, run, return only saved values), so a
tiny model can check the remote path without a network. See ``docs/remote.md``.

What travels: the trace body's source, the tensors it references and the code of
``bindscope.interventions.ops`` (registered with ``nnsight.register``; it imports only
torch and math). What comes back: only values the body saves (BSI ``[b, L, H]``, choice
log-probs, generated ids, per-head sums), never attention matrices unless asked for.

The modules, by concern:

* ``shipping``: what is shipped, and the audit against NDIF's sandbox whitelist;
* ``simulation``: the in-process server of ``remote="local"``;
* ``transport``: key, host, sending requests, translating failures into ``RemoteError``;
* ``preflight``: version checks and whether NDIF serves the model;
* ``load`` and ``probe``: building a remote model and its load-time self-check;
* ``nnsight_private``: every use of nnsight's private API (an nnsight upgrade starts there).
"""

from __future__ import annotations

from bindscope.remote.load import load_remote
from bindscope.remote.preflight import (
    ALLOW_DRIFT_ENV,
    SKIP_RUNNING_CHECK_ENV,
    RemoteVersionWarning,
    check_backend,
)
from bindscope.remote.probe import probe_capture
from bindscope.remote.shipping import SANDBOX_MODULES, SHIPPED_MODULES, register_shipped
from bindscope.remote.simulation import SimulatedServer, simulate
from bindscope.remote.transport import host, translate

__all__ = [
    "ALLOW_DRIFT_ENV",
    "SANDBOX_MODULES",
    "SHIPPED_MODULES",
    "SKIP_RUNNING_CHECK_ENV",
    "RemoteVersionWarning",
    "SimulatedServer",
    "check_backend",
    "host",
    "load_remote",
    "probe_capture",
    "register_shipped",
    "simulate",
    "translate",
]
