"""The runners take ``intervene=`` / ``per_row=`` and equal separate runs and direct scorers."""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InterventionError
from bindscope.interventions import Knockout, Mean, Patch, PatternPatch, Zero, head_means
from bindscope.metrics.binding import bsi_from_probs
from bindscope.runners.behaviour import generation, recognition
from bindscope.runners.binding import binding
from tests.conftest import PROMPTS, build_tiny
from tests.metrics.test_behaviour import REC
from tests.metrics.test_binding import RECORDS
from tests.reference_patching import EPS

HEADS = [(0, 1), (1, 0), (2, 2)]


def _knockout(model, text):
    n = len(model.tokenize(text))
    return Knockout(HEADS, [(q, k) for q in range(4, n) for k in range(q - 1)])


@pytest.mark.parametrize("strategy", ["shared_prefix", "full"])
def test_recognition_per_row_equals_separate_runs(tiny, strategy):
    means = head_means(tiny, PROMPTS, HEADS)
    per_row = [_knockout(tiny, REC[0].template), Mean(HEADS, means), [Zero(HEADS[:1])]]
    got = recognition(tiny, REC, per_row=per_row, strategy=strategy)
    for record, spec, result in zip(REC, per_row, got):
        alone = recognition(tiny, [record], intervene=spec, strategy="full")[0]
        clean = recognition(tiny, [record], strategy="full")[0]
        got_scores, alone_scores = torch.tensor(result.scores), torch.tensor(alone.scores)
        # log-probs from logits of size <= |scores|+10, through L layers in another layout
        atol = 16 * (tiny.n_layers + 1) * EPS * (float(alone_scores.abs().max()) + 10)
        torch.testing.assert_close(got_scores, alone_scores, rtol=0, atol=atol)
        effect = (torch.tensor(clean.scores) - alone_scores).abs().max()
        assert effect > 10 * atol  # the intervention moved the scores well past the bound


def test_generation_runner_takes_intervene(tiny):
    gen = [r for r in RECORDS if r.term in ("screen reader", "color contrast")][:2]
    rubric = {"terms": {r.term: {"keywords": ["x"]} for r in gen}}
    spec = Zero(HEADS)
    got = generation(tiny, gen, intervene=spec, rubric=rubric)
    texts = tiny.generate(
        [r.template for r in gen], max_new_tokens=gen[0].max_tokens, intervene=spec
    )
    assert [g.text for g in got] == texts
    per_row = [None, spec]
    rows = generation(tiny, gen, per_row=per_row, rubric=rubric)
    clean = generation(tiny, gen[:1], rubric=rubric)
    assert rows[0].text == clean[0].text and rows[1].text == got[1].text
    for fixed in (Patch, PatternPatch):  # the message names the spec it refused
        with pytest.raises(InterventionError, match=f"{fixed.__name__} needs texts of fixed"):
            generation(tiny, gen, intervene=fixed(HEADS, [gen[0].template]), rubric=rubric)


def test_binding_under_knockout_equals_bsi_of_knocked_out_probabilities(tiny):
    records = RECORDS[:2]
    results = binding(tiny, records, intervene=[Zero(HEADS[:1])])
    for record, result in zip(records, results):
        ids = tiny.tokenize(record.template)[: result.span[-1] + 1]
        probs = tiny.attention_probs([ids], intervene=Zero(HEADS[:1]))[0]
        expected = bsi_from_probs(probs, result.span)
        # BSI is a mean of probabilities (<= 1): a few eps per layer
        torch.testing.assert_close(result.bsi, expected, rtol=0, atol=16 * 4 * EPS)


def test_binding_knockout_of_an_sdpa_model_runs_eager_attentions_call(byte_tokenizer):
    """Loaded with sdpa (what a folder or Hub id gets), a tiny GPT-2 with
    ``reorder_and_upcast_attn`` runs its own attention method under ``eager()``: a Knockout
    planned before ``eager()`` named sdpa's attention call, which never ran there (nnsight's
    OutOfOrderError). Both models run the same eager arithmetic, so BSI is bit-identical."""
    sdpa = build_tiny("gpt2", byte_tokenizer, attn="sdpa")
    eager = build_tiny("gpt2", byte_tokenizer)
    assert sdpa.attn_implementation == "sdpa" and sdpa.hf.config.reorder_and_upcast_attn
    spec = Knockout(HEADS, [(2, 0), (3, 1)])
    got, ref = binding(sdpa, RECORDS, intervene=spec), binding(eager, RECORDS, intervene=spec)
    clean = binding(eager, RECORDS)
    for a, b in zip(got, ref):
        assert torch.equal(a.bsi.nan_to_num(-1), b.bsi.nan_to_num(-1))
    assert any(not torch.equal(b.bsi, c.bsi) for b, c in zip(ref, clean))  # it knocked out


def test_recognition_takes_site_specs_and_steer_in_both_strategies(tiny):
    """A kind the runner did not list before (Steer, a site Zero) is applied, never dropped:
    the shared-prefix strategy (choices on the prompt's cache) equals one pass per choice."""
    from bindscope.interventions import Steer

    vector = 2.0 * torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(3))
    per_row = [Steer("resid_post", 1, vector), Zero("mlp_out", layers=[0]), None]
    shared = recognition(tiny, REC, per_row=per_row, strategy="shared_prefix")
    full = recognition(tiny, REC, per_row=per_row, strategy="full")
    clean = recognition(tiny, REC, strategy="full")
    for a, b in zip(shared, full):
        a_scores, b_scores = torch.tensor(a.scores), torch.tensor(b.scores)
        atol = 16 * (tiny.n_layers + 1) * EPS * (float(b_scores.abs().max()) + 10)
        torch.testing.assert_close(a_scores, b_scores, rtol=0, atol=atol)
    for spec_row in range(2):
        moved = torch.tensor(full[spec_row].scores) - torch.tensor(clean[spec_row].scores)
        assert float(moved.abs().max()) > 1e-3  # the intervention was applied


@pytest.mark.parametrize("bad", [object(), "zero", 3.5, [Zero(HEADS), "patch"]])
def test_an_unknown_kind_fails_loudly_everywhere(tiny, bad):
    from bindscope.errors import BindscopeError

    with pytest.raises(BindscopeError):
        tiny.logits(PROMPTS[:1], intervene=bad)
    with pytest.raises(BindscopeError):
        recognition(tiny, REC[:1], intervene=bad)
    with pytest.raises(BindscopeError):
        tiny.generate_ids(PROMPTS[:1], max_new_tokens=2, per_row=[bad])
