"""Attribution patching is exact where first order is exact, on every family.

The independent computation is the exact single-head intervention (``Model.logits`` under
the same spec on that head alone). On a model whose metric is linear in the last layer's
head outputs the two must agree within float32 rounding; a wrong head misses by orders of
magnitude. The linearised copy: the final norm and the last layer's post-attention norm
become identities and the last layer's MLP outputs zero, so the logits are affine in the
last layer's head outputs, and the metric is a logit difference (linear in the logits).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bindscope
from bindscope.errors import InputError
from bindscope.families import family_for_config
from bindscope.interventions import Knockout, Mean, Patch, Resample, Zero, head_means
from bindscope.runners.attribution_patching import (
    LogitDifference,
    TargetLogprob,
    all_heads,
    attribution_scores,
    head_attribution_patching,
)
from tests.conftest import FAMILY_NAMES, PROMPTS, tiny_config
from tests.remote.test_simulation_specs import _variants
from tests.tolerance import logit_bound, rounding_bound

MARGIN = 100  # two orders of magnitude between the bound and a wrong head
TEXTS = [PROMPTS[0], PROMPTS[2], "Alt text describes an image for people"]
A, B = 5, 7  # the logit difference's tokens


class _ZeroMLP(nn.Module):
    def forward(self, x, *args, **kwargs):
        return torch.zeros_like(x)


def linearised(family: str, tokenizer, *, keep_mlp: bool = False):
    """The family's tiny model with its logits affine in the last layer's head outputs.

    No final norm, no last MLP, no norm after the last attention, and no final logit
    soft-capping (Gemma 2's tanh after the LM head). ``keep_mlp``: the last MLP stays (the
    logits are affine in its output, not in the heads').
    """
    from transformers import AutoModelForCausalLM

    torch.manual_seed(sum(map(ord, family)))
    config = tiny_config(family)
    if getattr(config, "final_logit_softcapping", None):
        config.final_logit_softcapping = None
    hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    row = family_for_config(hf.config)
    base = hf.base_model
    last = (base.layers if hasattr(base, "layers") else base.h)[-1]
    setattr(base, row.final_norm, nn.Identity())
    if not keep_mlp:
        last.mlp = _ZeroMLP()
    if row.attention_post_norm:
        setattr(last, row.attention_post_norm, nn.Identity())
    return bindscope.load_model(hf.eval(), tokenizer=tokenizer)


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def flat(request, byte_tokenizer, sp_tokenizer):
    tok = sp_tokenizer if request.param == "llama" else byte_tokenizer
    return linearised(request.param, tok)


def _logit_difference(model, texts, spec=None) -> torch.Tensor:
    logits = model.logits(texts, intervene=spec)
    return torch.stack([lg[-1, A] - lg[-1, B] for lg in logits]).double()


def _exact(model, texts, make, heads) -> torch.Tensor:
    """``[texts, heads]`` exact change of the logit difference, one head at a time."""
    clean = _logit_difference(model, texts)
    return torch.stack([_logit_difference(model, texts, make([h])) - clean for h in heads], 1)


def _bound(model, texts, estimates) -> float:
    """Rounding of the exact effect plus rounding of the estimate.

    The exact effect is the difference of two logit differences, four logits from two
    forward passes, each within ``logit_bound``. The estimate sums ``W * head_dim``
    products ``dz * dm/dz`` (a dot product as wide, over values no larger than the
    estimates themselves times that width's square root, by Cauchy-Schwarz on a rank-one
    map) through two matrix products (the gradient's unembedding and output projection).
    """
    width = max(len(t) if not isinstance(t, str) else len(model.tokenize(t)) for t in texts)
    largest = max(float(e.abs().nan_to_num().max()) for e in estimates)
    estimate_rounding = rounding_bound(magnitude=largest, width=width * model.head_dim, depth=2)
    return 4 * logit_bound(model, [t for t in texts if isinstance(t, str)] or PROMPTS) + (
        estimate_rounding
    )


def _check(model, texts, make, metric=None):
    last = model.n_layers - 1
    heads = [(last, h) for h in range(model.n_heads)]
    metric = metric or LogitDifference(A, B)
    estimates = head_attribution_patching(model, texts, metric, intervene=make(all_heads(model)))
    got = torch.stack([torch.stack([e[h] for h in heads]) for e in estimates])  # [texts, heads]
    exact = _exact(model, texts, make, heads)
    bound = _bound(model, texts, estimates)
    error = float((got - exact).abs().max())
    assert error <= bound, f"{model.family}: error {error:.2e} > derived bound {bound:.2e}"
    wrong = exact.roll(1, dims=1)  # every head compared with its neighbour's exact effect
    miss = float((got - wrong).abs().max())
    assert miss > MARGIN * bound, f"{model.family}: a wrong head misses by only {miss:.2e}"
    for e in estimates:  # the heads below are estimated too (first order, not compared)
        assert torch.isfinite(e).all()
    return error, bound


def test_zero_estimate_equals_exact_ablation_on_the_last_layer(flat):
    _check(flat, TEXTS, Zero)


def test_mean_estimate_equals_exact_mean_ablation(flat):
    means = head_means(flat, TEXTS, all_heads(flat))
    _check(flat, TEXTS, lambda heads: Mean(heads, means))


def test_patch_estimate_equals_exact_patch(flat):
    texts = _variants(flat)
    _check(flat, texts, lambda heads: Patch(heads, texts[::-1]))


def test_resample_estimate_equals_exact_resample(flat):
    _check(flat, TEXTS, lambda heads: Resample(heads, TEXTS, seed=3))


def test_knockout_estimate_equals_exact_knockout(flat):
    n = min(len(flat.tokenize(t)) for t in TEXTS)
    # late query rows of the shortest text lose their first keys: large, varied effects
    edges = [(q, k) for q in range(n - 3, n) for k in range(0, q - 1)]
    _check(flat, TEXTS, lambda heads: Knockout(heads, edges))


def test_target_logprob_is_first_order_not_exact(flat):
    """The log-softmax bends the metric: the estimate is close, not within rounding."""
    last = flat.n_layers - 1
    got = head_attribution_patching(flat, TEXTS, TargetLogprob(2), intervene=Zero(all_heads(flat)))
    assert torch.isfinite(torch.stack(got)[:, last]).all()


def test_bad_metric_and_method_are_refused(flat):
    heads = Zero(all_heads(flat))
    with pytest.raises(InputError, match="TargetLogprob"):
        head_attribution_patching(flat, ["a b"], TargetLogprob(5), intervene=heads)
    with pytest.raises(InputError, match="method"):
        head_attribution_patching(flat, TEXTS, TargetLogprob(1), intervene=heads, method="x")
    with pytest.raises(InputError, match="minus"):
        spec = Knockout(all_heads(flat), [(2, 0)])
        head_attribution_patching(flat, TEXTS, TargetLogprob(1), intervene=spec, method="atp")
    with pytest.raises(InputError, match="intervene"):
        head_attribution_patching(flat, TEXTS, TargetLogprob(1))


def test_clean_metric_equals_the_model_logits(tiny):
    """The gradient pass reads the logits the model returns (Gemma 2: after the final cap).

    Under ``tiny``'s Gemma 2 config (final soft-capping at 5) the LM head's own output
    differs from the returned logits by far more than rounding, so a pass that read it
    would fail here.
    """
    tiny.hf.requires_grad_(True)
    clean, _ = attribution_scores(tiny, TEXTS, LogitDifference(A, B), intervene=Zero([(0, 0)]))
    expected = _logit_difference(tiny, TEXTS).numpy()
    bound = 2 * logit_bound(tiny, TEXTS)  # two logits, each within one forward's rounding
    assert abs(clean - expected).max() <= bound
    if tiny.logit_softcap:
        batch = tiny.encode(TEXTS)
        with torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
            head = tiny.nnsight.lm_head.output[:, -1].save()
        uncapped = (head[:, A] - head[:, B]).double().numpy()
        assert abs(uncapped - expected).max() > 100 * bound
