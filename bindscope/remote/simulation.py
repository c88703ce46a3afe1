"""``remote="local"``: NDIF played in-process, stricter than nnsight's own local mode."""

from __future__ import annotations

import io
from typing import Any

import torch

from bindscope import nnsight_private
from bindscope.protocols import LanguageModel
from bindscope.remote.shipping import refused, register_shipped, sandbox_error


class SimulatedServer:
    """An nnsight backend that plays NDIF in-process (docs/remote.md, "Checking the remote path").

    What NDIF's whitelist refuses raises (``audit="error"``) or goes to ``findings``.
    """

    def __init__(self, nnsight_model: Any, *, audit: str = "error") -> None:
        if audit not in ("error", "record"):
            raise ValueError("audit must be 'error' or 'record'")
        self.model = nnsight_model
        # NDIF's model actor freezes the weights (inference only): a body that takes
        # gradients must start them itself, here as there.
        nnsight_private.underlying_module(nnsight_model).requires_grad_(False)
        self.audit = audit
        self.findings: set[str] = set()
        self.payload_bytes: list[int] = []
        self.result_bytes: list[int] = []

    def __call__(self, tracer: Any) -> None:
        """Serve one request (nnsight's backend interface)."""
        self.serve(tracer)

    def serve(self, tracer: Any, env: dict | None = None) -> None:
        """Run one request as the server would, after the client's per-request ``env``."""
        if env is not None:
            nnsight_private.apply_request_env(self.model, env)
        blob = nnsight_private.serialize_request(tracer)
        self.payload_bytes.append(len(blob))
        refs: list = []
        restored = nnsight_private.deserialize_request(blob, self.model, tracer, refs)
        problems = refused(refs)
        if problems and self.audit == "error":
            raise sandbox_error(problems, "remote='local'")
        self.findings.update(problems)
        pushed = nnsight_private.execute(restored)
        buffer = io.BytesIO()
        torch.save(pushed, buffer)  # saved values only
        self.result_bytes.append(buffer.tell())
        buffer.seek(0)
        nnsight_private.deliver(tracer, torch.load(buffer, map_location="cpu", weights_only=False))


def simulate(model: LanguageModel, *, audit: str = "error"):
    """Route a loaded model's traces through `SimulatedServer` (``remote="local"``)."""
    register_shipped()
    backend = SimulatedServer(model.nnsight, audit=audit)
    model.remote = "local"
    model.trace_options = {"backend": backend}
    model.remote_info = {"host": None, "simulation": backend}
    return model
