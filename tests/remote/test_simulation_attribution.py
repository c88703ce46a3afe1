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
from tests.conftest import PROMPTS
from tests.remote.test_simulation_specs import _variants
from tests.tolerance import assert_within, gradient_bound


def test_estimates_through_the_simulated_server_equal_local(twins):
    local, simulated = twins
    texts = _variants(local)
    heads = all_heads(local)
    for spec in (Zero(heads), Patch(heads, texts[::-1]), Knockout(heads, [(8, 0), (8, 1)])):
        got = head_attribution_patching(simulated, texts, TargetLogprob(2), intervene=spec)
        ref = head_attribution_patching(local, texts, TargetLogprob(2), intervene=spec)
        for g, r in zip(got, ref):
            # the server's weights are frozen: rounding apart (tests/tolerance.py)
            assert_within(g, r, gradient_bound(local, r), type(spec).__name__)
    # negative control: another head's estimate is off by far more than the bound
    assert (ref[0][1:] - ref[0][:-1]).abs().max() > 1e3 * gradient_bound(local, ref[0])
    # GradDrop: tensor hooks inside the shipped body
    options = {"intervene": Zero(heads), "grad_drop": True}
    got = head_attribution_patching(simulated, texts, TargetLogprob(2), **options)
    ref = head_attribution_patching(local, texts, TargetLogprob(2), **options)
    for g, r in zip(got, ref):
        assert_within(g, r, gradient_bound(local, r), "grad_drop")
    server = simulated.trace_options["backend"]
    assert server.result_bytes[-1] < 8192  # [L, b, H] estimates and [b] metrics only


def test_attribution_scan_through_the_simulated_server_equals_local(twins, tmp_path):
    """Estimates equal; the verified heads' exact effects agree within rounding.

    Locally the exact verification is the residual-start runner; remotely it is
    ``Model.logits`` (one full pass per head): both score the same ablations in float32,
    so each mean log-prob agrees within twice the logit bound (a log-softmax over logits
    each within ``logit_bound``), and an effect (clean - ablated) within twice that.
    """
    from bindscope.experiments import scan
    from tests.experiments import prompts_tiny
    from tests.tolerance import logit_bound

    local, simulated = twins
    prompts = prompts_tiny.write(tmp_path)
    kwargs = {"prompts": prompts, "method": "attribution", "verify": 3, "limit": 4}
    kwargs |= {"n_resamples": 199, "progress": False, "ablation": "mean"}
    mine = scan.run(simulated, out=tmp_path / "remote", **kwargs)
    theirs = scan.run(local, out=tmp_path / "local", **kwargs)
    (a,), (b,) = mine["models"].values(), theirs["models"].values()
    got, ref = a["metrics"]["logprob"], b["metrics"]["logprob"]
    estimates = torch.tensor(ref["estimate"])
    assert_within(torch.tensor(got["estimate"]), estimates, gradient_bound(local, estimates))
    assert got["verified"] == ref["verified"]
    bound = 4 * logit_bound(local, PROMPTS)
    values = {tuple(c["head"]): c["value"] for c in got["top"]}
    for cell in ref["top"]:
        assert abs(values[tuple(cell["head"])] - cell["value"]) <= bound, cell["condition"]
