"""The real sandbox: `bindscope ndif up --sandboxed` runs every request untrusted.

ndif 0.1.2's sandboxed actor ships each request's block to a runner process (``python -m
ndif.services.ray.sandbox.runner``) that holds only a meta model and drives the model
actor over a socket (ndif ``services/ray/sandbox/ARCHITECTURE.md``). Under ``--sandboxed``
the whole live layer runs that way (.ci/run runs it after the trusted pass); the test here
says which mode answered, from the process the block ran in.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.interventions import ops
from bindscope.remote import server
from tests.remote.live.conftest import HOME

pytestmark = pytest.mark.ndif_live

RUNNER = b"ndif.services.ray.sandbox.runner"


def sandboxed() -> bool:
    """Whether the running server was started with ``--sandboxed``."""
    return bool(server.status(home=HOME).get("sandboxed"))


def test_the_block_runs_in_the_runner_exactly_when_sandboxed(twins):
    local, far = twins
    batch = far.encode(["Alt text describes an image"])
    with torch.no_grad(), far.nnsight.trace(**batch.inputs, **far.trace_options):
        # runs on the server, in whichever process executes the block
        where = ops.save(open("/proc/self/cmdline", "rb").read())  # noqa: SIM115
        logits = far.nnsight.lm_head.output.save()
    assert (RUNNER in where) == sandboxed(), where
    # and the model it drives computes what the local one computes, either way
    with torch.no_grad(), local.nnsight.trace(**batch.inputs):
        want = local.nnsight.lm_head.output.save()
    assert torch.equal(logits, want)
