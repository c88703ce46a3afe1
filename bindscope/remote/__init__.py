"""Run bindscope on NDIF: a model without weights here, its forward passes on NDIF's GPUs."""

from __future__ import annotations

from bindscope.remote.load import load_remote, probe_capture
from bindscope.remote.preflight import (
    ALLOW_DRIFT_ENV,
    SKIP_RUNNING_CHECK_ENV,
    RemoteVersionWarning,
    check_backend,
)
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
