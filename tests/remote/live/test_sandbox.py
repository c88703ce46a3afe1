"""The real sandbox: `bindscope ndif up --sandboxed` runs every request untrusted.

ndif's sandboxed actor deserializes and runs each request's block in a runner process
with its module whitelist (ndif ``services/ray/sandbox``). Under ``--sandboxed`` the whole
live layer runs that way (``make test-live-sandboxed``; .ci/run runs both); these tests
say which mode the server is in and that the real sandbox refuses what bindscope's audit
(and ``SimulatedServer``) refuse, and nothing they let through.
"""

from __future__ import annotations

import os

import pytest
import torch

from bindscope.errors import RemoteSandboxError
from bindscope.remote import server, transport
from tests.remote.live.conftest import HOME, KEY

pytestmark = pytest.mark.ndif_live


def sandboxed() -> bool:
    """Whether the running server was started with ``--sandboxed``."""
    return bool(server.status(home=HOME).get("sandboxed"))


def test_a_module_outside_the_whitelist_is_refused_only_by_the_sandbox(twins, monkeypatch):
    local, far = twins
    batch = far.encode(["Alt text describes an image"])
    # with bindscope's audit off the request reaches the server, which judges it itself
    monkeypatch.setattr(transport, "audit", lambda model, tracer: [])
    if sandboxed():
        with (
            pytest.raises(RemoteSandboxError, match="sandbox refused") as error,
            torch.no_grad(),
            far.nnsight.trace(**batch.inputs, **far.trace_options),
        ):
            os.getpid()  # on the server: `os` is not in ndif's whitelist
            far.nnsight.lm_head.output.save()
        assert KEY not in str(error.value)
    else:
        with torch.no_grad(), far.nnsight.trace(**batch.inputs, **far.trace_options):
            os.getpid()  # trusted: the model's own process runs anything
            logits = far.nnsight.lm_head.output.save()
        assert torch.equal(logits[0], local.logits(["Alt text describes an image"])[0])


def test_the_audit_refuses_the_same_request_before_sending(twins):
    _, far = twins
    batch = far.encode(["Alt text describes an image"])
    with (
        pytest.raises(RemoteSandboxError, match="module os"),
        torch.no_grad(),
        far.nnsight.trace(**batch.inputs, **far.trace_options),
    ):
        os.getpid()
        far.nnsight.lm_head.output.save()
