"""The live layer: bindscope against the real NDIF server, started by ``bindscope ndif up``.

Every module is marked ``ndif_live`` (deselected by ``make test``; ``make test-live`` and
``.ci/run`` run it). One server serves both modes (``up --sandbox-key SANDBOX_KEY``): every
test runs trusted, and the tests whose outcome depends on the mode take the ``mode`` fixture
and run sandboxed too (docs/testing.md). With no server answering, or one that cannot give a
mode asked for, every test fails with what to run: the layer never skips.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import huggingface_hub
import pytest

import bindscope
from bindscope import local_ndif as server
from bindscope.loading import SERVED, cache_dir
from bindscope.local_ndif import DEFAULT_PORT, host

# A marked key: tests/remote/live/test_faults.py checks it appears in no payload, record,
# log line or message of ours.
KEY = "bindscope-live-key-3c9e71"
# The key whose requests the server runs sandboxed (.ci/run: `ndif up --sandbox-key` with it).
SANDBOX_KEY = "bindscope-live-sandboxed-8e41d7"
HOST = os.environ.get("BINDSCOPE_NDIF_LIVE_HOST") or host(DEFAULT_PORT)
# The server's folder (pid files, logs): where `bindscope ndif up` put it.
HOME = Path(os.environ.get("BINDSCOPE_NDIF_HOME") or cache_dir() / "ndif")


def answers(where: str = HOST) -> bool:
    try:
        with urllib.request.urlopen(f"{where}/ping", timeout=3) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def live():
    """The environment a client of the local server has: host, any key, the Hub offline."""
    if not answers():
        pytest.fail(
            f"no NDIF server answers at {HOST}: start it with `bindscope ndif up` (.ci/run "
            "and `make test-live` do); the live layer never skips",
            pytrace=False,
        )
    # nnsight's remote client (not quieted: keep its progress lines out of the test log)
    from nnsight import CONFIG

    patch = pytest.MonkeyPatch()
    patch.setenv("NDIF_HOST", HOST)
    patch.setenv("NDIF_API_KEY", KEY)
    patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    patch.setattr(CONFIG.APP, "REMOTE_LOGGING", False)
    yield HOST
    patch.undo()


_LOADED: dict[str, tuple] = {}


@pytest.fixture(scope="session", params=list(SERVED))
def twins(request, live):
    """(local, remote) for an embedded model: same float32 weights, here and on the server."""
    name = request.param
    if name not in _LOADED:
        local = bindscope.load_model(name)
        far = bindscope.load_model(SERVED[name], remote=True)
        _LOADED[name] = (local, far)
    return _LOADED[name]


def sandboxed() -> bool:
    """Whether the running server runs the requests of the key configured now sandboxed."""
    # heavy: nnsight's config, as the client reads it (the `live` fixture set it up)
    from nnsight import CONFIG

    state = server.status(home=HOME)
    digest = state.get("sandbox_key_sha256")
    if digest:
        return server.key_digest(CONFIG.API.APIKEY or "") == digest
    return bool(state.get("sandboxed"))


# A mode-dependent test of the runners: trusted on both models, sandboxed on one (what the
# sandbox changes, the process the block runs in and the gradient's path, is the model's
# neither). Use as ``@BOTH_MODES`` on a test taking ``twins`` and ``mode``.
BOTH_MODES = pytest.mark.parametrize(
    ("twins", "mode"),
    [*((name, "trusted") for name in SERVED), (next(iter(SERVED)), "sandboxed")],
    indirect=True,
)


@pytest.fixture(params=["trusted", "sandboxed"])
def mode(request, live, monkeypatch):
    """A test whose outcome depends on the server's mode, once in each: the key decides."""
    from nnsight import CONFIG

    key = SANDBOX_KEY if request.param == "sandboxed" else KEY
    monkeypatch.setenv("NDIF_API_KEY", key)
    monkeypatch.setattr(CONFIG.API, "APIKEY", key)
    if sandboxed() != (request.param == "sandboxed"):
        pytest.fail(
            f"the server at {live} cannot run requests {request.param}: start it with "
            f"`bindscope ndif up --sandbox-key {SANDBOX_KEY}` (as .ci/run does), which runs "
            "that key's requests sandboxed and every other key's trusted",
            pytrace=False,
        )
    return request.param
