"""Each remote failure has its own clear error, checked against a fake NDIF.

The fake replaces ``bindscope.remote.preflight._get`` (the preflight's only HTTP call)
and ``bindscope.remote.transport._send`` (job submission); nothing here touches the
network. The API key must never appear in a message, a warning or a record.
"""

from __future__ import annotations

import httpx
import pytest
from nnsight import CONFIG
from nnsight.intervention.backends.remote import RemoteError as JobFailed

import bindscope
import bindscope.remote as remote
from bindscope.errors import (
    ModelLoadError,
    RemoteAuthError,
    RemoteError,
    RemoteJobError,
    RemoteModelNotServedError,
    RemoteSandboxError,
    RemoteTimeoutError,
    RemoteUnreachableError,
    RemoteVersionError,
)
from bindscope.remote import preflight

KEY = "sk-test-NEVER-SHOWN-1234"
MODEL = "org/tiny-served"


def versions(**override) -> dict:
    import nnsight
    import torch
    import transformers

    packages = {
        "nnsight": nnsight.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    return {"python_version": "3.11", "packages": {**packages, **override}}


def status(*deployments: tuple[str, str]) -> dict:
    return {
        "deployments": {
            f"d{i}": {"repo_id": repo, "revision": "main", "application_state": state}
            for i, (repo, state) in enumerate(deployments)
        }
    }


class FakeNdif:
    """Answers GET /status and /env, or raises what a broken network would."""

    def __init__(self, status=None, env=None, error=None):
        self.status = status if status is not None else status_running()
        self.env = env if env is not None else versions()
        self.error = error
        self.calls: list[str] = []

    def __call__(self, path: str) -> dict:
        self.calls.append(path)
        if self.error is not None:
            raise self.error
        return {"/status": self.status, "/env": self.env}[path]


def status_running():
    return status((MODEL, "RUNNING"), ("openai-community/gpt2", "RUNNING"))


@pytest.fixture
def ndif(monkeypatch):
    """A configured key, a fake NDIF that serves MODEL, and no Hub lookups."""
    monkeypatch.setenv("NDIF_API_KEY", KEY)
    monkeypatch.setattr(CONFIG.API, "APIKEY", None)
    monkeypatch.delenv(remote.ALLOW_DRIFT_ENV, raising=False)
    monkeypatch.delenv(remote.SKIP_RUNNING_CHECK_ENV, raising=False)
    monkeypatch.setattr(preflight, "_canonical_id", lambda model_id: model_id)
    fake = FakeNdif()
    monkeypatch.setattr(preflight, "_get", fake)
    return fake


def _http_error(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://api.ndif.us/status")
    response = httpx.Response(code, request=request, text=f"key {KEY} refused")
    return httpx.HTTPStatusError(f"{code} for key {KEY}", request=request, response=response)


def _no_key_in(exc_info, capsys=None):
    assert KEY not in str(exc_info.value)
    assert KEY not in repr(exc_info.value.args)
    if capsys is not None:
        out, err = capsys.readouterr()
        assert KEY not in out + err


def test_missing_key_says_where_to_set_it(ndif, monkeypatch):
    monkeypatch.delenv("NDIF_API_KEY")
    with pytest.raises(RemoteAuthError) as info:
        remote.check_backend(MODEL)
    message = str(info.value)
    assert "NDIF_API_KEY" in message and "https://login.ndif.us" in message
    assert "nnsight.login()" in message
    assert ndif.calls == []  # no network before a key exists


def test_the_check_passes_and_reports_host_and_versions(ndif):
    info = remote.check_backend(MODEL)
    assert info["host"] == remote.host() and info["server_versions"]["nnsight"]
    assert ndif.calls == ["/status", "/env"]


@pytest.mark.parametrize(
    "error, kind, needle",
    [
        (httpx.ConnectError(f"connection refused ({KEY})"), RemoteUnreachableError, "reach"),
        (httpx.ReadTimeout(f"read timed out ({KEY})"), RemoteTimeoutError, "in time"),
        (_http_error(401), RemoteAuthError, "rejected the configured NDIF API key"),
        (_http_error(503), RemoteUnreachableError, "answered HTTP 503"),
    ],
)
def test_unreachable_timeout_and_refusals(ndif, capsys, error, kind, needle):
    ndif.error = error
    with pytest.raises(kind, match=needle) as info:
        remote.check_backend(MODEL)
    assert remote.host() in str(info.value)
    _no_key_in(info, capsys)


def test_model_not_served_names_what_runs(ndif):
    ndif.status = status(("openai-community/gpt2", "RUNNING"))
    with pytest.raises(RemoteModelNotServedError) as info:
        remote.check_backend(MODEL)
    message = str(info.value)
    assert f"{MODEL}@main" in message and "openai-community/gpt2" in message
    assert "not deployed" in message and remote.SKIP_RUNNING_CHECK_ENV in message


def test_model_deploying_and_other_revision(ndif, monkeypatch):
    ndif.status = status((MODEL, "DEPLOYING"))
    with pytest.raises(RemoteModelNotServedError, match="still deploying"):
        remote.check_backend(MODEL)
    ndif.status = status_running()
    with pytest.raises(RemoteModelNotServedError, match=f"{MODEL}@step1000"):
        remote.check_backend(MODEL, "step1000")  # revisions are separate deployments
    monkeypatch.setenv(remote.SKIP_RUNNING_CHECK_ENV, "1")
    assert remote.check_backend(MODEL, "step1000")["host"]


def test_nnsight_drift_is_an_error_unless_allowed(ndif, monkeypatch):
    ndif.env = versions(nnsight="0.7.0")
    with pytest.raises(RemoteVersionError) as info:
        remote.check_backend(MODEL)
    assert "nnsight" in str(info.value) and "0.7.0 on the server" in str(info.value)
    assert remote.ALLOW_DRIFT_ENV in str(info.value)
    monkeypatch.setenv(remote.ALLOW_DRIFT_ENV, "1")
    with pytest.warns(remote.RemoteVersionWarning, match="0.7.0"):
        info = remote.check_backend(MODEL)
    assert info["server_versions"]["nnsight"] == "0.7.0"  # recorded in the provenance


def test_transformers_major_drift_errors_minor_drift_warns(ndif):
    import transformers

    major = int(transformers.__version__.split(".")[0])
    ndif.env = versions(transformers=f"{major - 1}.50.0")
    with pytest.raises(RemoteVersionError, match="transformers"):
        remote.check_backend(MODEL)
    ndif.env = versions(transformers=f"{major}.0.0", torch="2.0.1")
    with pytest.warns(remote.RemoteVersionWarning, match="torch"):
        remote.check_backend(MODEL)


def test_server_without_env_endpoint_warns(ndif, monkeypatch):
    def get(path):
        if path == "/env":
            raise _http_error(404)
        return status_running()

    monkeypatch.setattr(preflight, "_get", get)
    with pytest.warns(remote.RemoteVersionWarning, match="did not report"):
        assert remote.check_backend(MODEL)["server_versions"] == {}


@pytest.mark.parametrize(
    "message, kind",
    [
        (f"Module bindscope is not whitelisted (key {KEY})", RemoteSandboxError),
        ("ModuleNotFoundError: No module named 'bindscope'", RemoteSandboxError),
        (f"{MODEL} is not dedicated and hotswapping is not supported", RemoteModelNotServedError),
        ("Job took longer than timeout", RemoteTimeoutError),
        (f"Unauthorized: invalid api key {KEY}", RemoteAuthError),
        ("CUDA out of memory", RemoteJobError),
    ],
)
def test_job_failures_are_translated(message, kind, monkeypatch):
    monkeypatch.setenv("NDIF_API_KEY", KEY)
    error = remote.translate(JobFailed(message), model=MODEL)
    assert isinstance(error, kind) and MODEL in str(error)
    assert KEY not in str(error)


def test_send_failures_keep_their_network_cause(monkeypatch):
    monkeypatch.setenv("NDIF_API_KEY", KEY)
    try:
        try:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        except httpx.ConnectError as cause:
            raise JobFailed(f"Failed to send request: {cause}") from cause
    except JobFailed as exc:
        error = remote.translate(exc, model=MODEL)
    assert isinstance(error, RemoteUnreachableError)
    assert remote.translate(KeyError("a bug, not the network"), model=MODEL) is None


@pytest.mark.parametrize(
    "model, kwargs, needle",
    [
        (None, {}, "needs a Hugging Face id"),
        (".", {}, "is a local folder"),
        (MODEL, {"dtype": "bfloat16"}, "drop dtype"),
        (MODEL, {"device": "cuda"}, "drop device"),
        (MODEL, {"remote": "yes"}, "remote must be True, 'local' or False"),
    ],
)
def test_load_model_remote_arguments(ndif, model, kwargs, needle):
    kwargs = {"remote": True, **kwargs}
    with pytest.raises(ModelLoadError, match=needle):
        bindscope.load_model(model, **kwargs)


def test_loaded_model_object_cannot_go_remote(ndif, byte_tokenizer):
    from tests.conftest import build_tiny

    tiny = build_tiny("gpt2", byte_tokenizer, self_check=False)
    with pytest.raises(ModelLoadError, match="not a loaded GPT2LMHeadModel"):
        bindscope.load_model(tiny.hf, remote=True)


def test_every_remote_error_is_a_bindscope_error():
    for kind in (RemoteAuthError, RemoteTimeoutError, RemoteSandboxError, RemoteVersionError):
        assert issubclass(kind, RemoteError) and issubclass(kind, bindscope.BindscopeError)
