"""Attribution patching through the simulated NDIF server gives what a local run gives.

Gradients run inside the shipped body (``torch.autograd.grad``), so the whole estimate,
donor pass included, must survive the sandbox audit and come back equal to the local one.
"""

from __future__ import annotations

import torch

from bindscope.interventions import Knockout, Patch, Zero
from bindscope.runners.attribution_patching import (
    TargetLogprob,
    all_heads,
    head_attribution_patching,
)
from tests.remote.test_simulation import twins  # noqa: F401 (the local and remote twins)
from tests.remote.test_simulation_specs import _variants


def test_estimates_through_the_simulated_server_equal_local(twins):  # noqa: F811
    local, simulated = twins
    texts = _variants(local)
    heads = all_heads(local)
    for spec in (Zero(heads), Patch(heads, texts[::-1]), Knockout(heads, [(8, 0), (8, 1)])):
        got = head_attribution_patching(simulated, texts, TargetLogprob(2), intervene=spec)
        ref = head_attribution_patching(local, texts, TargetLogprob(2), intervene=spec)
        for g, r in zip(got, ref):
            assert torch.equal(g, r), type(spec).__name__
    server = simulated.trace_options["backend"]
    assert server.result_bytes[-1] < 8192  # [L, b, H] estimates and [b] metrics only
