"""Any spec the engine applies, it estimates: sites and ``Steer``, on every family.

The independent computation is the exact intervention (``Model.logits`` under the same
spec). On the linearised copy of ``test_attribution_patching`` (no final norm, no last MLP,
no norm after the last attention, no final soft-capping) the logit difference is affine in
the last layer's ``attn_out``, ``mlp_out`` and ``resid_post``, so there the estimate must
equal the exact effect within float32 rounding; compared with another text's exact effect
it misses by orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.interventions import Knockout, Mean, Resample, Steer, Zero
from bindscope.interventions.means import site_means
from bindscope.runners.attribution_patching import (
    LogitDifference,
    attribution_patching,
    head_attribution_patching,
)
from tests.runners.test_attribution_patching import TEXTS, A, B
from tests.tolerance import logit_bound, rounding_bound

MARGIN = 100  # two orders of magnitude between the bound and another text's effect


def _logit_difference(model, per_row=None) -> torch.Tensor:
    logits = model.logits(TEXTS, per_row=per_row)
    return torch.stack([lg[-1, A] - lg[-1, B] for lg in logits]).double()


def _specs(model):
    """``{name: (site, per_row specs)}``; each text steers its own way, so effects differ."""
    last = model.n_layers - 1
    torch.manual_seed(0)
    vectors = 10 * torch.randn(len(TEXTS), model.d_model)  # effects far above rounding
    ends = [(len(model.tokenize(t)) - 1,) for t in TEXTS]  # each text's last position
    means = site_means(model, TEXTS[::-1], "resid_post", [last])
    every = {
        "zero attn_out": Zero("attn_out", layers=[last]),
        "mean resid_post": Mean("resid_post", means, layers=[last]),
        "resample resid_post": Resample("resid_post", TEXTS, layers=[last], seed=3),
    }
    out = {name: (spec.site, [spec] * len(TEXTS)) for name, spec in every.items()}
    out["steer resid_post"] = ("resid_post", [Steer("resid_post", last, v) for v in vectors])
    out["steer attn_out at the end"] = (
        "attn_out",
        [Steer("attn_out", last, 2 * v, positions=p) for v, p in zip(vectors, ends)],
    )
    out["steer attn_out, scaled"] = (
        "attn_out",
        [Steer("attn_out", last, v, scale=0.5) for v in vectors],
    )
    return out


def test_site_and_steer_estimates_equal_exact_effects(flat):
    last = flat.n_layers - 1
    clean = _logit_difference(flat)
    metric = LogitDifference(A, B)
    width = max(len(flat.tokenize(t)) for t in TEXTS)
    for name, (site, per_row) in _specs(flat).items():
        found = attribution_patching(flat, TEXTS, metric, per_row=per_row)
        assert all(set(f) == {(site, last)} for f in found), name
        got = torch.stack([f[(site, last)][0] for f in found])  # [texts]
        exact = _logit_difference(flat, per_row=per_row) - clean
        # the exact effect: four logits from two forward passes; the estimate: a dot
        # product over every position and the hidden width, through the unembedding
        largest = float(got.abs().max())
        bound = 4 * logit_bound(flat, TEXTS) + rounding_bound(
            magnitude=largest, width=width * flat.d_model, depth=2
        )
        error = float((got - exact).abs().max())
        assert error <= bound, f"{flat.family} {name}: error {error:.2e} > bound {bound:.2e}"
        miss = float((got - exact.roll(1)).abs().max())
        assert miss > MARGIN * bound, f"{flat.family} {name}: another text misses by {miss:.2e}"


def test_sites_below_are_estimated_and_heads_refuse_a_site(flat):
    vector = torch.ones(flat.d_model)
    found = attribution_patching(
        flat, TEXTS, LogitDifference(A, B), intervene=Steer("resid_pre", 0, vector)
    )
    assert all(torch.isfinite(f[("resid_pre", 0)]).all() for f in found)
    # the linearised last MLP returns a constant: no gradient, so no estimate (not 0);
    # OLMo 2 and Gemma 2/3 read mlp_out after a norm, which has weights: a gradient
    last = flat.n_layers - 1
    if flat.sites["mlp_out"][0] != "mlp":
        return
    found = attribution_patching(
        flat, TEXTS, LogitDifference(A, B), intervene=Steer("mlp_out", last, vector)
    )
    assert all(torch.isnan(f[("mlp_out", last)]).all() for f in found)
    with pytest.raises(Exception, match="attribution_patching"):
        head_attribution_patching(
            flat, TEXTS, LogitDifference(A, B), intervene=Zero("mlp_out", layers=[0])
        )


def test_specs_of_one_call_are_estimated_as_alone(flat):
    """Every cell's estimate comes from one clean pass: specs on other cells do not move it.

    Donor rows (``Resample``) widen the batch and move the knockout's masks to the donor
    pass's layout, so this also checks that each spec's cells survive being planned
    together; the two computations differ by the padding's rounding only.
    """
    last = flat.n_layers - 1
    metric = LogitDifference(A, B)
    n = min(len(flat.tokenize(t)) for t in TEXTS)
    specs = [
        Knockout([(last, 0), (last, 1)], [(q, 0) for q in range(1, n)]),
        Resample([(0, 2), (1, 3)], TEXTS, seed=3),
        Steer("resid_post", last, torch.ones(flat.d_model)),
    ]
    together = attribution_patching(flat, TEXTS, metric, intervene=specs)
    alone: list[dict] = [{} for _ in TEXTS]
    for spec in specs:
        for into, found in zip(alone, attribution_patching(flat, TEXTS, metric, intervene=spec)):
            into.update(found)
    width = max(len(flat.tokenize(t)) for t in TEXTS)
    largest = max(float(v.abs().nan_to_num().max()) for f in alone for v in f.values())
    bound = 4 * logit_bound(flat, TEXTS) + rounding_bound(
        magnitude=largest, width=width * flat.d_model, depth=flat.n_layers + 1
    )
    assert largest > MARGIN * bound  # the estimates are not all rounding
    for got, want in zip(together, alone):
        assert set(got) == set(want) == {("pattern", last), ("head_out", 0), ("head_out", 1),
                                         ("resid_post", last)}  # fmt: skip
        for cell, value in want.items():
            torch.testing.assert_close(got[cell], value, rtol=0, atol=bound, equal_nan=True)
