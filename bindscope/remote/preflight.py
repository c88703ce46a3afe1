"""The preflight of a remote run: key, host, package versions, and whether NDIF serves it."""

from __future__ import annotations

import os
import re
import warnings

import torch

from bindscope import nnsight_private
from bindscope.errors import ModelLoadError, RemoteModelNotServedError, RemoteVersionError
from bindscope.remote.transport import api_key, host, translated

ALLOW_DRIFT_ENV = "BINDSCOPE_ALLOW_VERSION_DRIFT"
SKIP_RUNNING_CHECK_ENV = "BINDSCOPE_NDIF_HOTSWAP"


class RemoteVersionWarning(UserWarning):
    """Client and server versions differ in a way that should not change results."""


def _get(path: str) -> dict:
    """GET ``{host}{path}`` as JSON: the preflight's only network call (tests replace it)."""
    import httpx  # heavy: the remote path only

    response = httpx.get(f"{host()}{path}", timeout=httpx.Timeout(10.0, read=30.0))
    response.raise_for_status()
    return response.json()


def _release(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else (-1, -1)


def _warn(message: str) -> None:
    warnings.warn(message, RemoteVersionWarning, stacklevel=4)  # where check_backend was called


def check_versions(server: dict | None, *, model: str) -> dict:
    """The server's versions; serious drift (`_drift`) raises unless allowed, minor warns."""
    # heavy: the remote path only
    import nnsight
    import transformers

    local = {package.__name__: package.__version__ for package in (nnsight, transformers, torch)}
    if not server:
        _warn(
            f"{host()} did not report its package versions; remote results for {model} may "
            "differ from local ones if they differ"
        )
        return {}
    packages = server.get("packages", {})
    remote = {name: packages.get(name) for name in local}
    serious, minor = _drift(local, remote)
    if serious and not os.environ.get(ALLOW_DRIFT_ENV):
        raise RemoteVersionError(
            f"{host()} runs different versions than this machine ({'; '.join(serious)}), "
            f"so {model} could give different results or fail to deserialize. Install the "
            f"server's versions (pip install 'nnsight=={remote['nnsight']}' ...), or set "
            f"{ALLOW_DRIFT_ENV}=1 to run anyway (recorded in the provenance)."
        )
    if serious or minor:
        _warn(f"NDIF version drift for {model}: {'; '.join(serious + minor)}")
    return remote


def _drift(local: dict[str, str], remote: dict[str, str | None]) -> tuple[list[str], list[str]]:
    # serious: another nnsight minor or transformers major release (serialization changes)
    serious, minor = [], []
    for name, mine in local.items():
        theirs = remote[name]
        if theirs is None or theirs == mine:
            continue
        same_minor = _release(theirs) == _release(mine)
        same_major = _release(theirs)[0] == _release(mine)[0]
        line = f"{name} {mine} here, {theirs} on the server"
        if (name == "nnsight" and not same_minor) or (name == "transformers" and not same_major):
            serious.append(line)
        else:
            minor.append(line)
    return serious, minor


def _canonical_id(model_id: str) -> str:
    from huggingface_hub import HfApi, constants  # heavy: the remote path only

    cache = nnsight_private.hub_id_cache()
    if model_id not in cache and constants.HF_HUB_OFFLINE:
        cache[model_id] = model_id  # offline (a local NDIF): the id is canonical as written
    if model_id not in cache:
        try:
            cache[model_id] = HfApi().model_info(model_id).id
        except Exception as exc:
            raise ModelLoadError(
                f"Could not look up {model_id} on the Hugging Face Hub ({type(exc).__name__}: "
                f"{str(exc)[:200]}). Remote models are built from the Hub's config and "
                "tokenizer, so this machine needs to reach huggingface.co."
            ) from None
    return cache[model_id]


def model_state(status: dict, repo_id: str, revision: str | None) -> str | None:
    """The best state ``/status`` reports for this repo and revision (nnsight's rule), or None."""
    order = ["RUNNING", "DEPLOYING", "NOT_STARTED", "UNHEALTHY"]
    found = [
        value.get("application_state", "UNHEALTHY")
        for value in status.get("deployments", {}).values()
        if value.get("repo_id") == repo_id and (value.get("revision") or "main") == revision
    ]
    return min(found, key=lambda s: order.index(s) if s in order else len(order), default=None)


def check_backend(model_id: str, revision: str | None = None) -> dict:
    """Preflight for a remote run; ``{"host", "server_versions"}`` for the provenance."""
    api_key()
    status = translated(_get, "/status", model=model_id)
    try:
        server = _get("/env")
    except Exception:  # an older server without /env: compare nothing, warn below
        server = None
    versions = check_versions(server, model=model_id)
    if not os.environ.get(SKIP_RUNNING_CHECK_ENV):
        _check_served(status, _canonical_id(model_id), revision)
    return {"host": host(), "server_versions": versions}


def _check_served(status: dict, repo: str, revision: str | None) -> None:
    state = model_state(status, repo, revision or "main")
    if state == "RUNNING":
        return
    running = sorted(
        {
            v.get("repo_id", "?")
            for v in status.get("deployments", {}).values()
            if v.get("application_state") == "RUNNING"
        }
    )
    label = f"{repo}@{revision or 'main'}"
    reasons = {"DEPLOYING": "is still deploying; retry in a few minutes", None: "is not deployed"}
    why = reasons.get(state) or f"is {str(state).lower()}"
    raise RemoteModelNotServedError(
        f"NDIF at {host()} does not run {label} now: it {why}. Running now: "
        f"{', '.join(running[:12]) or 'none'}. Pick one of those, run locally "
        f"without --remote, or, if your key may hot-swap models, set "
        f"{SKIP_RUNNING_CHECK_ENV}=1 to send requests anyway."
    )
