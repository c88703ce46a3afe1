"""The remote path, played in-process by ``SimulatedServer``, gives what a local run gives.

Each model here has a twin with the same weights: one runs locally, the other sends every
trace through the simulated server (payload unpickled with NDIF's whitelist, body run on
copies, only saved values returned through ``torch.save``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

import bindscope
import bindscope.remote as remote
from bindscope.experiments import c5
from bindscope.interventions import Mean, head_means
from bindscope.prompts import PromptRecord
from bindscope.results.records import provenance, read_records
from bindscope.runners.binding import binding
from tests.conftest import PROMPTS, build_tiny, tiny_config
from tests.experiments import prompts_tiny
from tests.tolerance import assert_within, logit_bound, prob_bound, row_sum_bound

HEADS = [(0, 1), (1, 0), (2, 2)]

RECORDS = [
    PromptRecord(
        "gen_001", "screen reader", "generation", "In web accessibility, a screen reader is"
    ),
    PromptRecord(
        "gen_002", "color contrast", "generation", "Developers should test color contrast and"
    ),
    PromptRecord("gen_003", "alt text", "generation", "Alt text describes an image for people"),
]


def test_generation_under_ablation_equals_local(twins):
    local, simulated = twins
    rows = [HEADS[:1], [], HEADS]
    for model_kwargs in ({"per_row": rows}, {"ablate": HEADS}):
        got = simulated.generate_ids(PROMPTS, max_new_tokens=6, **model_kwargs)
        assert got == local.generate_ids(PROMPTS, max_new_tokens=6, **model_kwargs)
    means = head_means(local, PROMPTS, HEADS)
    meaned = [Mean(row, means) if row else None for row in rows]
    got = simulated.generate_ids(PROMPTS, max_new_tokens=6, per_row=meaned)
    assert got == local.generate_ids(PROMPTS, max_new_tokens=6, per_row=meaned)
    server = simulated.trace_options["backend"]
    assert server.result_bytes[-1] < 4096  # the generated ids, nothing else


def test_probabilities_logits_and_means_equal_local(twins):
    local, simulated = twins
    for got, ref in zip(
        simulated.attention_probs(PROMPTS, ablate=HEADS),
        local.attention_probs(PROMPTS, ablate=HEADS),
    ):
        assert torch.equal(got, ref)
    for got, ref in zip(simulated.logits(PROMPTS), local.logits(PROMPTS)):
        assert torch.equal(got, ref)
    got, ref = head_means(simulated, PROMPTS, HEADS), head_means(local, PROMPTS, HEADS)
    assert got.n_positions == ref.n_positions
    assert all(torch.equal(got.means[layer], ref.means[layer]) for layer in ref.means)


def test_sessions_group_batches_into_one_request(twins):
    _, simulated = twins
    server = simulated.trace_options["backend"]
    before = len(server.payload_bytes)
    simulated.generate_ids(PROMPTS * 3, max_new_tokens=2, ablate=HEADS, batch_size=2)
    assert len(server.payload_bytes) - before == 1  # 5 batches, one session


def test_eb_star_equals_local(twins):
    local, simulated = twins
    for kwargs in ({}, {"ablate": HEADS}):
        for got, ref in zip(
            binding(simulated, RECORDS, **kwargs), binding(local, RECORDS, **kwargs)
        ):
            assert got.eb_star == ref.eb_star or (
                math.isnan(got.eb_star) and math.isnan(ref.eb_star)
            )
            assert torch.equal(got.bsi.nan_to_num(-1), ref.bsi.nan_to_num(-1))
    assert simulated.trace_options["backend"].result_bytes[-1] < 8192  # BSI, not probabilities


def _records_by_key(folder) -> dict:
    return {r["key"]: r for r in read_records(folder / "c5" / "records.jsonl")}


def test_c5_equals_local(tmp_path, sp_tokenizer):
    prompts = prompts_tiny.write(tmp_path)
    runs = {}
    bound = 0.0
    for name in ("local", "simulated"):
        model = build_tiny("llama", sp_tokenizer, self_check=False)
        # a log-softmax moves by at most twice its logits' error; scores average those
        bound = max(bound, 2 * logit_bound(model, PROMPTS))
        if name == "simulated":
            remote.simulate(model)
        c5.run(
            model,
            prompts=prompts,
            out=tmp_path / name,
            k=2,
            n_random=3,
            rubric=prompts_tiny.RUBRIC,
            batch_size=4,
            progress=False,
        )
        runs[name] = _records_by_key(tmp_path / name)
    assert runs["local"].keys() == runs["simulated"].keys()
    for key, ref in runs["local"].items():
        got = runs["simulated"][key]
        # Remotely recognition scores each prompt+choice in full (the KV cache would cross
        # the network twice); locally the prompt's cache is shared: equal to float noise.
        scores, expected = (
            got["metrics"].pop("choice_scores", []),
            ref["metrics"].pop("choice_scores", []),
        )
        assert scores == pytest.approx(expected, abs=bound), key
        # the margin is a difference of two choice scores: twice their bound
        margin, expected = got["metrics"].pop("margin", 0.0), ref["metrics"].pop("margin", 0.0)
        assert margin == pytest.approx(expected, abs=2 * bound), key
        assert got["metrics"] == ref["metrics"], key
        assert got["heads"] == ref["heads"], key
        assert got["provenance"]["remote"] == "local" and ref["provenance"]["remote"] is False


def test_load_model_remote_local_records_remote_and_capture(byte_tokenizer):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(tiny_config("olmo2"), attn_implementation="sdpa")
    model = bindscope.load_model(hf.eval(), tokenizer=byte_tokenizer, remote="local")
    assert model.remote == "local" and model.capture_fallback is None
    prov = provenance(model)
    assert (prov["remote"], prov["capture"], prov["ndif_host"]) == ("local", "eager", None)
    assert "capture_fallback" not in prov
    json.dumps(prov)  # plain JSON, nothing of the backend in it
    assert model.attn_implementation == "sdpa"  # eager only around captures


def test_missing_weights_fall_back_to_recompute(monkeypatch, sp_tokenizer):
    """A server that returns no attention weights under eager: recompute, and say so."""
    from transformers.models.llama import modeling_llama

    local = build_tiny("llama", sp_tokenizer)
    reference = local.attention_probs(PROMPTS, ablate=HEADS)
    eager = modeling_llama.eager_attention_forward

    def without_weights(*args, **kwargs):
        return eager(*args, **kwargs)[0], None

    monkeypatch.setattr(modeling_llama, "eager_attention_forward", without_weights)
    simulated = remote.simulate(build_tiny("llama", sp_tokenizer, self_check=False))
    checks = remote.probe_capture(simulated)
    # the probe text is one sentence of under 64 tokens
    assert checks["row_sum_error"] <= row_sum_bound(64) and checks["ablation_effect"] > 0
    assert "no attention weights came back" in simulated.capture_fallback
    assert simulated.capture_mode == simulated.capture_method == "recompute"
    prov = provenance(simulated)
    assert prov["capture"] == "recompute" and "recomputed" in prov["capture_fallback"]
    bound = prob_bound(local)  # recomputed from q and k vs eager: rounding only
    for got, ref in zip(simulated.attention_probs(PROMPTS, ablate=HEADS), reference):
        assert_within(got, ref, bound, "recompute")


def test_missing_weights_without_probe_fail_clearly(monkeypatch, sp_tokenizer):
    from transformers.models.llama import modeling_llama

    eager = modeling_llama.eager_attention_forward
    monkeypatch.setattr(
        modeling_llama, "eager_attention_forward", lambda *a, **k: (eager(*a, **k)[0], None)
    )
    simulated = remote.simulate(build_tiny("llama", sp_tokenizer, self_check=False))
    with pytest.raises(RuntimeError, match="returned no weights although eager attention"):
        simulated.attention_probs(PROMPTS[:1])


def test_the_twins_fixture_is_defined_once():
    """issue 42: the simulated-remote test modules share ``twins`` from tests/remote/conftest.py."""
    here = Path(__file__).parent
    defines = re.compile(r"^def twins\(", re.MULTILINE)
    assert [p.name for p in here.glob("test_*.py") if defines.search(p.read_text())] == []
