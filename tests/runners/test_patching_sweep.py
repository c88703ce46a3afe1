"""`patching_sweep` equals per-cell activation patching with plain torch hooks, on every family.

The reference runs the corrupt text once per cell through the HF model with a forward hook
that writes the clean run's activation (read by another hook) at one site, layer and
position, and applies the metric to the last position's logits. The sweep batches the cells.
Bound: the metric is a difference of two logits, so twice `reference_patching.logit_atol`
(float32 noise of logits from two batch layouts); the grid with its layers in reverse order
misses it by orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InputError, InterventionError
from bindscope.metrics import logit_diff
from bindscope.runners import patching_sweep
from tests.interventions.test_specs import CHANGED, variants
from tests.reference_patching import logit_atol
from tests.reference_sites import hooked
from tests.tolerance import misses

MARGIN = 100
SITES = ("resid_pre", "head_out", "attn_out", "resid_mid", "mlp_out", "resid_post")


def _hook_cell(model, clean, corrupt, site, layer, position):
    """The corrupt run's last logits with the clean activation at one cell, plain hooks."""
    into: list[torch.Tensor] = []
    with hooked(model.hf, model.family, site, layer, into=into), torch.no_grad():
        model.hf(torch.tensor([clean]))
    donor = into[0]

    def edit(x):
        x = x.clone()
        x[0, position] = donor[0, position].to(x.dtype)
        return x

    with hooked(model.hf, model.family, site, layer, edit=edit), torch.no_grad():
        return model.hf(torch.tensor([corrupt])).logits[0, -1:].float()


def test_the_grid_equals_per_cell_patching_with_hooks(tiny):
    clean, corrupt = variants(tiny, 2)
    n = len(clean)
    with torch.no_grad():
        last = [tiny.hf(torch.tensor([t])).logits[0, -1] for t in (clean, corrupt)]
    a, b = int(last[0].argmax()), int(last[1].argmax())
    if a == b:  # the two runs agree on their top token: compare it with the runner-up
        b = int(last[1].topk(2).indices[1])

    def metric(logits):
        return logit_diff(logits, a, b)

    sites = [s for s in SITES if s in tiny.sites]
    positions = [CHANGED - 1, CHANGED, -1]
    grid = patching_sweep(
        tiny, clean, corrupt, sites=sites, positions=positions, metric=metric, batch_size=7
    )
    assert list(grid) == sites
    with torch.no_grad():  # the HF forward's logits are soft-capped already (Gemma 2)
        ref_logits = tiny.hf(torch.tensor([corrupt])).logits[0].float()
    atol = 2 * logit_atol(ref_logits, tiny.n_layers)
    for site in sites:
        assert grid[site].shape == (tiny.n_layers, len(positions))
        ref = torch.tensor(
            [
                [metric(_hook_cell(tiny, clean, corrupt, site, layer, p % n))
                 for p in positions]
                for layer in range(tiny.n_layers)
            ]
        )  # fmt: skip
        torch.testing.assert_close(grid[site], ref, rtol=0, atol=atol)
        # negative control: the layers in reverse order (a wrong layer per cell)
        assert misses(grid[site], ref.flip(0), atol) > MARGIN, site
    # every position (the default) on one site: the asked positions are its columns
    full = patching_sweep(tiny, clean, corrupt, sites="resid_pre", metric=metric)["resid_pre"]
    assert full.shape == (tiny.n_layers, n)
    torch.testing.assert_close(full[:, [p % n for p in positions]], grid["resid_pre"],
                               rtol=0, atol=atol)  # fmt: skip
    # before the changed token clean and corrupt agree: patching there changes nothing
    assert torch.equal(full[:, 0], full[:, CHANGED - 1])


def test_bad_sweeps_are_refused_before_any_trace(tiny):
    clean, corrupt = variants(tiny, 2)

    def metric(logits):
        return float(logits[0, 0])

    with pytest.raises(InputError, match="same length"):
        patching_sweep(tiny, clean, corrupt[:-1], sites="resid_pre", metric=metric)
    with pytest.raises(InterventionError, match="pattern"):
        patching_sweep(tiny, clean, corrupt, sites=["pattern"], metric=metric)
    with pytest.raises(InputError, match="outside"):
        patching_sweep(tiny, clean, corrupt, sites="resid_pre", positions=[99], metric=metric)
    with pytest.raises(InputError, match="not a function"):
        patching_sweep(tiny, clean, corrupt, sites="resid_pre", metric="logit_diff")
    with pytest.raises(InputError, match="finite number"):
        patching_sweep(tiny, clean, corrupt, sites="resid_pre", layers=[0], positions=[0],
                       metric=lambda logits: logits)  # fmt: skip
