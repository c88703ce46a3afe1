"""Patch, Resample and Knockout through the simulated NDIF path give what a local run gives.

Same twins as ``test_simulation.py``: one model runs locally, its same-weights twin sends
every trace through ``SimulatedServer`` (payload unpickled with NDIF's whitelist, body run
on copies, only saved values returned).
"""

from __future__ import annotations

import pytest
import torch

import bindscope.remote as remote
from bindscope.interventions import Knockout, Patch, Resample, Zero
from bindscope.runners.binding import binding
from tests.conftest import PROMPTS, build_tiny
from tests.remote.test_simulation import FAMILIES, HEADS, RECORDS


@pytest.fixture(scope="module", params=FAMILIES)
def twins(request, byte_tokenizer, sp_tokenizer):
    tok = sp_tokenizer if request.param == "llama" else byte_tokenizer
    local = build_tiny(request.param, tok)
    simulated = remote.simulate(build_tiny(request.param, tok, self_check=False))
    remote.probe_capture(simulated)
    return local, simulated


def _variants(model):
    base = model.tokenize(PROMPTS[2])
    out = [base]
    for token in (30, 31, 32):
        ids = list(base)
        ids[5] = token
        out.append(ids)
    return out


def _knockout(model):
    n = [len(model.tokenize(t)) for t in PROMPTS]
    return [Knockout(HEADS, [(m - 1, 0), (m - 1, 1)]) if m > 3 else None for m in n]


def test_patch_resample_and_knockout_logits_equal_local(twins):
    local, simulated = twins
    texts = _variants(local)
    cases = [
        {"intervene": Patch(HEADS, texts[::-1])},
        {"intervene": Resample(HEADS, texts, seed=1)},
        {"per_row": [Patch(HEADS, [texts[1]]), None, Zero(HEADS), Knockout(HEADS, [(9, 2)])]},
    ]
    for kwargs in cases:
        for got, ref in zip(simulated.logits(texts, **kwargs), local.logits(texts, **kwargs)):
            assert torch.equal(got, ref), kwargs
    per_row = _knockout(local)
    for got, ref in zip(
        simulated.logits(PROMPTS, per_row=per_row), local.logits(PROMPTS, per_row=per_row)
    ):
        assert torch.equal(got, ref)


def test_patch_and_knockout_probabilities_generation_and_binding_equal_local(twins):
    local, simulated = twins
    texts = _variants(local)
    spec = [Patch(HEADS[:1], texts[1:2]), Knockout(HEADS[1:], [(6, 0), (7, 1)])]
    for got, ref in zip(
        simulated.attention_probs(texts[:1], intervene=spec),
        local.attention_probs(texts[:1], intervene=spec),
    ):
        assert torch.equal(got, ref)
    per_row = _knockout(local)
    got = simulated.generate_ids(PROMPTS, max_new_tokens=4, per_row=per_row)
    assert got == local.generate_ids(PROMPTS, max_new_tokens=4, per_row=per_row)
    knock = Knockout(HEADS, [(1, 0)])  # every measured prefix has >= 2 tokens
    for a, b in zip(
        binding(simulated, RECORDS, intervene=knock), binding(local, RECORDS, intervene=knock)
    ):
        assert torch.equal(a.bsi.nan_to_num(-1), b.bsi.nan_to_num(-1))
