"""Faults with the real NDIF server: a server gone mid-run, a model it does not serve, a
job that raises there, a result too big for one response, a job longer than the client's
timeout; and the API key stays ours.

The server's own execution limit is not produced here (the local server sets none);
tests/remote/test_errors.py maps its message with a fake server.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
import torch

import bindscope
from bindscope import local_ndif as server
from bindscope import nnsight_private
from bindscope.errors import (
    RemoteJobError,
    RemoteModelNotServedError,
    RemoteTimeoutError,
    RemoteUnreachableError,
)
from bindscope.experiments import c5
from bindscope.loading import SERVED
from bindscope.remote import transport
from tests.remote.live.conftest import HOME, KEY
from tests.remote.live.test_experiments import _prompts, _summary

pytestmark = pytest.mark.ndif_live

NAME = "SmolLM2-135M-Instruct"


@pytest.fixture
def counted(monkeypatch):
    """Every request sent, with the payload it carried and the records on disk then."""
    sent: list[dict] = []
    original = transport._send
    state = {"stop_at": None, "records": None}

    def send(model, tracer):
        path = state["records"]
        lines = len(path.read_text().splitlines()) if path and path.exists() else 0
        sent.append({"payload": nnsight_private.serialize_request(tracer), "records": lines})
        if len(sent) == state["stop_at"]:
            server.stop_piece(home=HOME, name="api")  # the server goes away mid-run
        return original(model, tracer)

    monkeypatch.setattr(transport, "_send", send)
    return sent, state


def _run(model, prompts, out):
    return c5.run(model, prompts=prompts, out=out, k=2, n_random=2, progress=False)


def test_server_stopped_mid_c5_resumes_to_the_same_summary(live, counted, tmp_path, caplog):
    sent, state = counted
    caplog.set_level(logging.DEBUG)
    prompts = _prompts(tmp_path)
    model = bindscope.load_model(SERVED[NAME], remote=True)
    state["records"] = tmp_path / "full" / "c5" / "records.jsonl"
    _run(model, prompts, tmp_path / "full")
    full = list(sent)
    sent.clear()
    stop_at = max(2, 2 * len(full) // 3)
    state.update(stop_at=stop_at, records=tmp_path / "cut" / "c5" / "records.jsonl")
    try:
        with pytest.raises(RemoteUnreachableError) as stopped:
            _run(model, prompts, tmp_path / "cut")
    finally:
        server.start_piece(home=HOME, name="api")
    state["stop_at"] = None
    kept = len(state["records"].read_text().splitlines())
    # at most the batch in flight is lost: every record written before it is kept
    assert kept >= full[stop_at - 1]["records"] > 0
    _run(model, prompts, tmp_path / "cut")
    assert _summary(tmp_path / "cut", "c5", NAME) == _summary(tmp_path / "full", "c5", NAME)
    keys = [json.loads(line)["key"] for line in state["records"].read_text().splitlines()]
    assert len(keys) == len(set(keys)) == full[-1]["records"] or len(keys) == len(set(keys))
    # the marked key: in no payload, record, message or log line of ours
    assert KEY not in str(stopped.value) and live in str(stopped.value)
    assert all(KEY.encode() not in s["payload"] for s in full + sent)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert all(KEY not in r.getMessage() for r in caplog.records)


def test_a_model_not_deployed_names_what_runs(live):
    with pytest.raises(RemoteModelNotServedError, match="is not deployed") as error:
        bindscope.load_model("HuggingFaceTB/SmolLM2-360M-Instruct", remote=True)
    assert SERVED[NAME] in str(error.value) and KEY not in str(error.value)


def test_a_job_raising_on_the_server_brings_its_traceback(twins):
    _, far = twins
    batch = far.encode(["Alt text describes an image"])
    with (
        pytest.raises(RemoteJobError, match="IndexError") as error,
        torch.no_grad(),
        far.nnsight.trace(**batch.inputs, **far.trace_options),
    ):
        far.nnsight.lm_head.output[:, :, 10**9].save()  # out of range there, not here
    assert "Traceback" in str(error.value) and KEY not in str(error.value)


def test_a_result_too_big_for_one_response_comes_through_the_object_store(twins):
    local, far = twins
    store = HOME / "logs" / "object-store.log"
    before = store.read_text().count("GET /")
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 30)  # ~300 tokens
    layers = list(range(local.n_layers))
    # patterns [H, n, n] of every layer: tens of MB, past redis' 8 MiB inline cap
    got = far.capture([text], sites=["pattern"], layers=layers)[0]["pattern"]
    ref = local.capture([text], sites=["pattern"], layers=layers)[0]["pattern"]
    assert sum(t.numel() * 4 for t in ref.values()) > 16 * 2**20
    assert all(torch.equal(got[layer], ref[layer]) for layer in layers)
    assert store.read_text().count("GET /") > before  # fetched from the store, not inline


def test_a_job_longer_than_the_client_timeout_is_a_remote_timeout(twins, monkeypatch):
    local, far = twins
    batch = far.encode(["Alt text describes an image"])
    monkeypatch.setenv(transport.TIMEOUT_ENV, "2")
    started = time.monotonic()
    with (
        pytest.raises(RemoteTimeoutError, match=f"{transport.TIMEOUT_ENV}=2") as error,
        torch.no_grad(),
        far.nnsight.trace(**batch.inputs, **far.trace_options),
    ):
        time.sleep(10)  # on the server: silent for 10 s, past the client's 2
        far.nnsight.lm_head.output.save()
    waited = time.monotonic() - started
    # it gave up after about 2 s of silence (the job's first status lines come before),
    # not after the job's 10 s
    assert 2 <= waited < 9, waited
    assert "sent nothing for 2 s" in str(error.value) and KEY not in str(error.value)
    # the next request (no timeout) waits behind the sleeping job and then runs as usual
    monkeypatch.delenv(transport.TIMEOUT_ENV)
    got, ref = far.logits(["Alt text"]), local.logits(["Alt text"])
    assert torch.equal(got[0], ref[0])
