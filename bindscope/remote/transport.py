"""Talking to NDIF: the API key, the host, sending requests and translating failures.

Failures become ``RemoteError`` subclasses that say what to do, and never quote the API key.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar
from urllib.parse import urlparse

from bindscope import nnsight_private
from bindscope.errors import (
    BindscopeError,
    InputError,
    RemoteAuthError,
    RemoteError,
    RemoteJobError,
    RemoteModelNotServedError,
    RemoteSandboxError,
    RemoteTimeoutError,
    RemoteUnreachableError,
)
from bindscope.remote.shipping import audit, sandbox_error

KEY_ENV = "NDIF_API_KEY"
KEY_URL = "https://login.ndif.us"
TIMEOUT_ENV = "BINDSCOPE_NDIF_TIMEOUT"
T = TypeVar("T")
_JOB_STATUS: ContextVar[bool] = ContextVar("bindscope_job_status", default=True)


@contextlib.contextmanager
def job_status(show: bool) -> Iterator[None]:
    """Show (True: as nnsight's config says) or hide job-status lines of requests sent inside."""
    token = _JOB_STATUS.set(show)
    try:
        yield
    finally:
        _JOB_STATUS.reset(token)


def local_server(where: str) -> bool:
    """``where`` is on this machine (loopback): a ``bindscope ndif up`` server, no accounts."""
    name = urlparse(where).hostname or ""
    with contextlib.suppress(ValueError):
        return name == "localhost" or ipaddress.ip_address(name).is_loopback
    return False


def _key_help(where: str) -> str:
    if local_server(where):
        return (
            f"{where} is a local server (`bindscope ndif up`), which takes any non-empty key: "
            f"export {KEY_ENV}=local"
        )
    return (
        f"Get a key at {KEY_URL} and set it in the environment variable {KEY_ENV} (export "
        f"{KEY_ENV}=...), or store it once with: python -c 'import nnsight; nnsight.login()'"
    )


def _config():
    from nnsight import CONFIG  # heavy: the remote path only

    return CONFIG


def host() -> str:
    """The NDIF host: ``NDIF_HOST``, else nnsight's ``CONFIG.API.HOST``."""
    if os.environ.get("NDIF_HOST"):  # set after nnsight was imported: requests must agree
        _config().API.HOST = os.environ["NDIF_HOST"]
    return _config().API.HOST


def api_key() -> str:
    """The configured NDIF API key; raises ``RemoteAuthError`` saying where to set one."""
    key = os.environ.get(KEY_ENV) or _config().API.APIKEY
    if not key:
        raise RemoteAuthError(
            f"No NDIF API key is configured, so {host()} cannot run remote jobs. "
            + _key_help(host())
        )
    _config().API.APIKEY = key  # an env var set after nnsight was imported
    return key


# A key at least this long is redacted wherever it occurs; a shorter one (a local server
# takes any key, "x" included) only where it stands as a whole token (not inside a run of
# _TOKEN characters), so that ``x`` as a key leaves ``index`` alone but not ``key=x``.
MIN_KEY_LENGTH = 8
_TOKEN = r"[\w-]"


def request_timeout() -> float | None:
    """``BINDSCOPE_NDIF_TIMEOUT`` in seconds, or None when unset; refuses a bad value."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise InputError(
            f"{TIMEOUT_ENV}={raw!r}: give the seconds a request may wait without a word from "
            f"NDIF (a positive number, e.g. {TIMEOUT_ENV}=600), or unset it to wait as long "
            "as the job runs"
        )
    return seconds


def redact(text: str) -> str:
    """``text`` with the API key (if any is configured) replaced by ``***``."""
    keys = {key for key in (os.environ.get(KEY_ENV), _config().API.APIKEY) if key}
    for key in sorted(keys, key=len, reverse=True):  # a key inside another goes second
        if len(key) >= MIN_KEY_LENGTH:
            text = text.replace(key, "***")
        else:
            text = re.sub(rf"(?<!{_TOKEN}){re.escape(key)}(?!{_TOKEN})", "***", text)
    return text


def translate(exc: BaseException, *, model: str) -> RemoteError | None:
    """Map a transport or server exception to a ``RemoteError`` (key redacted); None: a bug."""
    # heavy: the remote path only
    import httpx
    import websocket

    where = host()
    chain = [exc]
    while len(chain) < 8 and (cause := chain[-1].__cause__ or chain[-1].__context__):
        chain.append(cause)
    text = redact(f"{type(exc).__name__}: {exc}")
    # a long one cut to its start and its end: a server traceback names its error last
    detail = text if len(text) <= 2000 else f"{text[:300]}\n[...]\n{text[-1700:]}"
    timeouts = (httpx.TimeoutException, websocket.WebSocketTimeoutException, TimeoutError)
    if any(isinstance(c, timeouts) for c in chain):
        limit = os.environ.get(TIMEOUT_ENV)
        more = f" (or allow more than {TIMEOUT_ENV}={limit} seconds)" if limit else ""
        return RemoteTimeoutError(
            f"{where} did not answer in time for {model} ({detail}). NDIF may be busy or "
            f"the model still loading; retry later, or use smaller --batch-size{more}."
        )
    for c in chain:
        status = getattr(getattr(c, "response", None), "status_code", None)
        if isinstance(c, websocket.WebSocketBadStatusException):
            status = c.status_code
        if status in (401, 403):
            return _rejected_key(where, detail, model)
        if isinstance(c, httpx.HTTPStatusError):
            return RemoteUnreachableError(
                f"NDIF at {where} answered HTTP {status} for {model} ({detail}). The service "
                "may be down or redeploying: python -c 'import nnsight; print(nnsight.status())'"
            )
    network = (httpx.TransportError, websocket.WebSocketException, ConnectionError, OSError)
    if any(isinstance(c, network) for c in chain):
        return RemoteUnreachableError(
            f"Could not reach NDIF at {where} for {model} ({detail}). Check the network, "
            "the host (NDIF_HOST), and NDIF's status with: python -c 'import nnsight; "
            "print(nnsight.status())'"
        )
    if isinstance(exc, nnsight_private.job_failed()):
        return _job_failure(detail, where=where, model=model)
    return None


def _job_failure(detail: str, *, where: str, model: str) -> RemoteError:
    # A server traceback is judged by its last line (the error): its frames quote server code
    # (``timeout=self.execution_timeout``) that says nothing about this failure.
    lines = detail.strip().splitlines()
    text = (lines[-1] if "Traceback" in detail and lines else detail).lower()
    if re.search(r"api.?key|unauthori[sz]ed|forbidden|\b40[13]\b", text):
        return _rejected_key(where, detail, model)
    if re.search(r"whitelist|not allowed|modulenotfounderror|no module named", text):
        return RemoteSandboxError(
            f"NDIF's sandbox refused the request for {model} ({detail}). This is a "
            "bindscope bug: trace bodies must call only bindscope.interventions.ops."
        )
    if re.search(r"hotswap|not dedicated|not deployed|not running|no deployment", text):
        return RemoteModelNotServedError(
            f"NDIF does not serve {model} now ({detail}). See "
            "python -c 'import nnsight; print(nnsight.status())' for what runs."
        )
    if re.search(r"timeout|timed out|took longer", text):
        return RemoteTimeoutError(
            f"The job for {model} ran past NDIF's time limit ({detail}); use a smaller "
            "--batch-size so each request does less."
        )
    return RemoteJobError(f"The NDIF job for {model} failed on the server: {detail}")


def _rejected_key(where: str, detail: str, model: str) -> RemoteAuthError:
    if local_server(where):
        return RemoteAuthError(
            f"{where} rejected the request for {model} ({detail}). {_key_help(where)}"
        )
    return RemoteAuthError(
        f"{where} rejected the configured NDIF API key for {model} ({detail}). Check the key in "
        f"{KEY_ENV} or nnsight's config (python -c 'import nnsight; nnsight.login()'); "
        f"keys come from {KEY_URL}."
    )


def translated(call: Callable[..., T], *args: Any, model: str) -> T:
    """``call(*args)``, its transport or server failures raised as `translate` maps them."""
    try:
        return call(*args)
    except BindscopeError:
        raise
    except Exception as exc:
        error = translate(exc, model=model)
        if error is None:
            raise
        raise error from None  # the cause could quote the key


class NdifBackend:
    """An nnsight backend that audits a trace or session, then sends it to NDIF as one request."""

    def __init__(self, nnsight_model: Any, *, model_name: str) -> None:
        self.model = nnsight_model
        self.name = model_name

    def __call__(self, tracer: Any):
        """Audit and send one request (nnsight's backend interface)."""
        problems = audit(self.model, tracer)
        if problems:
            raise sandbox_error(problems, self.name)
        return translated(_send, self.model, tracer, model=self.name)


def _send(nnsight_model: Any, tracer: Any):
    """Submit one request to NDIF and wait for its saved values (tests replace this)."""
    return nnsight_private.submit(
        nnsight_model, tracer, timeout=request_timeout(), show_status=_JOB_STATUS.get()
    )
