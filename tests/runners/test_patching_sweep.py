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
from tests.reference_patching import logit_atol, pattern_patch_reference
from tests.reference_sites import hooked
from tests.tolerance import misses

MARGIN = 100
SITES = ("resid_pre", "head_out", "attn_out", "resid_mid", "mlp_out", "resid_post")


def _hook_cell(model, clean, corrupt, site, layer, position, head=None):
    """The corrupt run's last logits with the clean activation at one cell, plain hooks
    (``head``: only that head's slice of the output projection's input)."""
    into: list[torch.Tensor] = []
    with hooked(model.hf, model.family, site, layer, into=into), torch.no_grad():
        model.hf(torch.tensor([clean]))
    donor = into[0]
    width = model.head_dim
    part = slice(None) if head is None else slice(head * width, (head + 1) * width)

    def edit(x):
        x = x.clone()
        x[0, position, part] = donor[0, position, part].to(x.dtype)
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
    with pytest.raises(InterventionError, match="cannot sweep"):
        patching_sweep(tiny, clean, corrupt, sites=["patterns"], metric=metric)
    with pytest.raises(InputError, match="by_head"):
        patching_sweep(tiny, clean, corrupt, sites="head_out", by_head="yes", metric=metric)
    with pytest.raises(InputError, match="outside"):
        patching_sweep(tiny, clean, corrupt, sites="resid_pre", positions=[99], metric=metric)
    with pytest.raises(InputError, match="not a function"):
        patching_sweep(tiny, clean, corrupt, sites="resid_pre", metric="logit_diff")
    with pytest.raises(InputError, match="finite number"):
        patching_sweep(tiny, clean, corrupt, sites="resid_pre", layers=[0], positions=[0],
                       metric=lambda logits: logits)  # fmt: skip


def _metric(model, clean, corrupt):
    with torch.no_grad():
        last = [model.hf(torch.tensor([t])).logits[0, -1] for t in (clean, corrupt)]
    a, b = int(last[0].argmax()), int(last[1].argmax())
    if a == b:
        b = int(last[1].topk(2).indices[1])
    return lambda logits: logit_diff(logits, a, b)


def test_head_by_position_grids_equal_a_loop_of_single_patches(tiny):
    """head_out and pattern, one head at a time, against hooks (head_out) and an attention
    function writing the clean pattern row (pattern), one patched run per cell."""
    model = tiny
    clean, corrupt = variants(model, 2)
    metric = _metric(model, clean, corrupt)
    positions = [CHANGED, -1]
    where = [p % len(clean) for p in positions]
    grid = patching_sweep(model, clean, corrupt, sites=["head_out", "pattern"],
                          positions=positions, by_head=True, metric=metric)  # fmt: skip
    whole = patching_sweep(model, clean, corrupt, sites="pattern", positions=positions,
                           metric=metric)["pattern"]  # fmt: skip
    with torch.no_grad():
        atol = 2 * logit_atol(model.hf(torch.tensor([corrupt])).logits[0].float(), model.n_layers)
    layers, heads = range(model.n_layers), range(model.n_heads)
    ref = {
        "head_out": [[[metric(_hook_cell(model, clean, corrupt, "head_out", layer, p, h))
                       for h in heads] for p in where] for layer in layers],
        "pattern": [[[metric(pattern_patch_reference(model.hf, clean, corrupt, [(layer, h, p)]))
                      for h in heads] for p in where] for layer in layers],
    }  # fmt: skip
    for site in ("head_out", "pattern"):
        assert grid[site].shape == (model.n_layers, len(positions), model.n_heads)
        torch.testing.assert_close(grid[site], torch.tensor(ref[site]), rtol=0, atol=atol)
        # negative control: each cell against its neighbouring head's reference
        wrong = torch.tensor(ref[site]).roll(1, dims=2)
        assert misses(grid[site], wrong, atol) > MARGIN, site
    every = torch.tensor([[metric(pattern_patch_reference(
        model.hf, clean, corrupt, [(layer, h, p) for h in heads])) for p in where]
        for layer in layers])  # fmt: skip
    torch.testing.assert_close(whole, every, rtol=0, atol=atol)
