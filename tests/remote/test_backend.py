"""``load_model(id, remote=True)`` end to end, against a fake NDIF.

The client builds the model from an offline Hub cache on the meta device, exactly as for a
real remote run; the fake server (``_send`` replaced) runs each request with
``SimulatedServer`` on a twin that holds the same weights, applying the request's
attention implementation as NDIF does.
"""

from __future__ import annotations

import json

import huggingface_hub.constants
import pytest
import torch
from nnsight import CONFIG
from nnsight.intervention.backends.remote import RemoteError as JobFailed
from nnsight.modeling.huggingface import _ID_CACHE

import bindscope
import bindscope.remote as remote
from bindscope.errors import InterventionError, RemoteSandboxError
from bindscope.interventions import Steer, head_means
from bindscope.remote import preflight, transport
from bindscope.results.records import provenance
from tests.conftest import PROMPTS, tiny_config
from tests.remote.test_errors import KEY, FakeNdif, status, versions
from tests.remote.test_shipping import _leaky_trace
from tests.tolerance import assert_within, prob_bound

REPO = "org/tiny-llama"
HEADS = [(0, 1), (2, 3)]


@pytest.fixture
def fake_ndif(tmp_path, monkeypatch, sp_tokenizer):
    """An offline Hub cache holding REPO, and a fake NDIF serving it from a twin."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(7)
    hf = AutoModelForCausalLM.from_config(tiny_config("llama"), attn_implementation="sdpa")
    snapshot = tmp_path / f"models--{REPO.replace('/', '--')}" / "snapshots" / ("0" * 40)
    hf.save_pretrained(snapshot)
    sp_tokenizer.save_pretrained(snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setitem(_ID_CACHE, REPO, REPO)

    twin = bindscope.load_model(hf.eval(), tokenizer=AutoTokenizer.from_pretrained(snapshot))
    server = remote.SimulatedServer(twin.nnsight)
    sent = []

    def send(nnsight_model, tracer):
        sent.append(nnsight_model.to_model_key())
        server.serve(tracer, env=nnsight_model._remoteable_get_env())

    monkeypatch.setenv("NDIF_API_KEY", KEY)
    monkeypatch.setattr(CONFIG.API, "APIKEY", None)
    monkeypatch.setattr(preflight, "_get", FakeNdif(status((REPO, "RUNNING")), versions()))
    monkeypatch.setattr(transport, "_send", send)
    return twin, server, sent


def test_remote_model_runs_on_the_server_and_matches_its_twin(fake_ndif):
    twin, server, sent = fake_ndif
    model = bindscope.load_model(REPO, remote=True)
    assert next(model.hf.parameters()).device.type == "meta"  # no weights here
    assert model.remote == "ndif" and model.capture_method == "eager"
    assert len(sent) == 1 and f'"repo_id": "{REPO}"' in sent[0]  # the load-time probe

    rows = [HEADS, [], HEADS[:1]]
    assert model.generate_ids(PROMPTS, max_new_tokens=5, per_row=rows) == twin.generate_ids(
        PROMPTS, max_new_tokens=5, per_row=rows
    )
    for got, ref in zip(model.attention_probs(PROMPTS[:2]), twin.attention_probs(PROMPTS[:2])):
        assert torch.equal(got, ref)
    got, ref = head_means(model, PROMPTS, HEADS), head_means(twin, PROMPTS, HEADS)
    assert all(torch.equal(got.means[layer], ref.means[layer]) for layer in ref.means)
    steer = Steer("resid_mid", 1, torch.ones(model.d_model))
    far = model.capture(PROMPTS, sites=["mlp_out"], layers=[2], intervene=steer)
    near = twin.capture(PROMPTS, sites=["mlp_out"], layers=[2], intervene=steer)
    assert all(torch.equal(a["mlp_out"][2], b["mlp_out"][2]) for a, b in zip(far, near))
    assert server.findings == set()
    before = len(sent)
    with pytest.raises(InterventionError, match="meta device"):
        model.logit_lens(PROMPTS)  # the final norm's weights are not here: refused, not sent
    assert len(sent) == before

    prov = provenance(model)
    assert (prov["remote"], prov["device"], prov["dtype"]) == ("ndif", "ndif", None)
    assert prov["ndif_host"] == remote.host() and prov["server_versions"]["nnsight"]
    assert KEY not in json.dumps(prov)


def test_server_that_cannot_switch_to_eager_falls_back_to_recompute(fake_ndif, monkeypatch):
    twin, server, _ = fake_ndif
    reference = twin.attention_probs(PROMPTS)

    def send(nnsight_model, tracer):
        env = nnsight_model._remoteable_get_env()
        if env["attn_implementation"] == "eager":
            raise JobFailed(
                "ValueError: LlamaForCausalLM cannot switch its attention implementation to "
                "'eager': it does not follow transformers' attention interface"
            )
        server.serve(tracer, env=env)

    monkeypatch.setattr(transport, "_send", send)
    model = bindscope.load_model(REPO, remote=True)
    assert "could not switch to eager" in model.capture_fallback
    assert provenance(model)["capture"] == "recompute"
    bound = prob_bound(twin)  # recomputed from q and k vs eager: rounding only
    for got, ref in zip(model.attention_probs(PROMPTS), reference):
        assert_within(got, ref, bound, "recompute")


def test_a_refused_payload_fails_before_it_is_sent(fake_ndif, monkeypatch):
    _, _, sent = fake_ndif
    model = bindscope.load_model(REPO, remote=True)
    before = len(sent)
    with pytest.raises(RemoteSandboxError, match=r"head_checks\.normalize_heads \(pickled by ref"):
        _leaky_trace(model)
    assert len(sent) == before  # refused here, not after queueing on NDIF


def test_server_errors_reach_the_caller_translated(fake_ndif, monkeypatch):
    model = bindscope.load_model(REPO, remote=True)

    def send(nnsight_model, tracer):
        raise JobFailed(f"Module bindscope is not whitelisted ({KEY})")

    monkeypatch.setattr(transport, "_send", send)
    with pytest.raises(RemoteSandboxError, match=REPO) as info:
        model.logits(PROMPTS[:1])
    assert KEY not in str(info.value)
