"""The real sandbox: `bindscope ndif up --sandboxed` runs every request untrusted.

ndif 0.1.2's sandboxed actor ships each request's block to a runner process (``python -m
ndif.services.ray.sandbox.runner``) that holds only a meta model and drives the model
actor over a socket (ndif ``services/ray/sandbox/ARCHITECTURE.md``). Under ``--sandboxed``
the key decides: ``up --sandbox-key`` runs that key's requests sandboxed and every other
key's trusted (tests/remote/live/conftest.py, ``mode``); the test here says which mode
answered, from the process the block ran in.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.interventions import ops
from tests.remote.live.conftest import BOTH_MODES, sandboxed

pytestmark = pytest.mark.ndif_live

RUNNER = b"ndif.services.ray.sandbox.runner"


@BOTH_MODES
def test_the_block_runs_in_the_runner_exactly_when_sandboxed(twins, mode):
    local, far = twins
    batch = far.encode(["Alt text describes an image"])
    with torch.no_grad(), far.nnsight.trace(**batch.inputs, **far.trace_options):
        # runs on the server, in whichever process executes the block
        where = ops.save(open("/proc/self/cmdline", "rb").read())  # noqa: SIM115
        logits = far.nnsight.lm_head.output.save()
    assert (RUNNER in where) == sandboxed() == (mode == "sandboxed"), where
    # and the model it drives computes what the local one computes, either way
    with torch.no_grad(), local.nnsight.trace(**batch.inputs):
        want = local.nnsight.lm_head.output.save()
    assert torch.equal(logits, want)
