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
from bindscope import nnsight_private
from bindscope.cli import main
from bindscope.errors import (
    InputError,
    InterventionError,
    ModelLoadError,
    RemoteAuthError,
    RemoteSandboxError,
)
from bindscope.experiments import c5
from bindscope.interventions import Steer, head_means
from bindscope.remote import preflight, transport
from bindscope.results.records import provenance
from tests.conftest import PROMPTS, tiny_config
from tests.experiments import prompts_tiny
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
    with pytest.raises(InputError, match="meta device"):
        model.run_with_cache(PROMPTS)  # the decompositions read weights (issue 44)
    with pytest.raises(InputError, match="meta device"):
        model.W_Q  # noqa: B018
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


SEND = transport._send  # the real one: through nnsight_private.submit


@pytest.fixture
def job_status_seen(fake_ndif, monkeypatch):
    """Each request's ``show_status`` as it reaches nnsight's backend, served by the twin."""
    _, server, _ = fake_ndif
    seen: list[bool] = []

    def submit(nnsight_model, tracer, *, timeout=None, show_status=True):
        seen.append(show_status)
        server.serve(tracer, env=nnsight_model._remoteable_get_env())

    monkeypatch.setattr(transport, "_send", SEND)
    monkeypatch.setattr(nnsight_private, "submit", submit)
    return seen


@pytest.mark.parametrize("progress", [False, True])
def test_progress_false_silences_the_job_status_lines(job_status_seen, tmp_path, progress):
    """nnsight prints a status line per job update (95 kB for a 12-request C5)."""
    model = bindscope.load_model(REPO, remote=True)
    assert job_status_seen == [True]  # the load-time probe, outside any run
    job_status_seen.clear()
    options = {"k": 2, "n_random": 1, "rubric": prompts_tiny.RUBRIC, "batch_size": 4}
    c5.run(model, prompts=prompts_tiny.write(tmp_path), out=tmp_path, progress=progress, **options)
    assert job_status_seen and set(job_status_seen) == {progress}


def test_no_progress_on_the_cli_silences_them_from_the_load_on(job_status_seen, tmp_path):
    prompts = prompts_tiny.write(tmp_path)
    argv = ["c5", "--model", REPO, "--remote", "--prompts", str(prompts), "--k", "2"]
    argv += ["--n-random", "1", "--batch-size", "4", "--out", str(tmp_path), "--no-progress"]
    main(argv)  # the tiny model's own summary does not matter here
    assert job_status_seen and set(job_status_seen) == {False}


def test_submit_turns_nnsight_s_status_display_off(monkeypatch):
    from nnsight.intervention.backends.display import StatusDisplay

    class Backend:
        def __init__(self):
            self.display = StatusDisplay(enabled=True)

        def __call__(self, tracer):
            return self.display.enabled

    class Model:
        def _remote_backend(self, *args):
            return Backend()

    monkeypatch.setattr(CONFIG.APP, "REMOTE_LOGGING", True)
    assert nnsight_private.submit(Model(), None, show_status=False) is False
    assert nnsight_private.submit(Model(), None) is True  # nnsight's own setting otherwise


def test_load_model_default_remote_suggests_the_served_smollm2():
    with pytest.raises(ModelLoadError, match="HuggingFaceTB/SmolLM2-135M-Instruct") as error:
        bindscope.load_model("default", remote=True)
    assert "gemma" not in str(error.value)
    with pytest.raises(ModelLoadError, match="google/gemma-3-270m"):
        bindscope.load_model("gemma-3-270m", remote=True)


@pytest.mark.parametrize("where", ["http://127.0.0.1:8001", "http://localhost:8101"])
def test_auth_errors_against_a_local_server_say_it_takes_any_key(monkeypatch, where):
    monkeypatch.setenv("NDIF_HOST", where)
    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    monkeypatch.setattr(CONFIG.API, "APIKEY", None)
    with pytest.raises(RemoteAuthError) as missing:
        transport.api_key()
    rejected = transport._rejected_key(where, "HTTP 401", REPO)
    for message in (str(missing.value), str(rejected)):
        assert transport.KEY_URL not in message and "login" not in message
        assert "takes any non-empty key" in message and "NDIF_API_KEY=local" in message
    monkeypatch.setenv("NDIF_HOST", "https://api.ndif.us")
    with pytest.raises(RemoteAuthError, match=transport.KEY_URL):
        transport.api_key()
