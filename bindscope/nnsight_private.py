"""Every use of nnsight's private API in bindscope, for the remote path, in one module.

Written against nnsight 0.8.1; private paths are imported on use, so a moved one fails by
name (tests/remote exercises every function here).
"""

from __future__ import annotations

import linecache
import threading
import time
from collections.abc import Callable
from typing import Any

# deserialize_request swaps process-wide state (cloudpickle's tracker, linecache): one at a time
_SWAP = threading.Lock()


class _Recorder(dict):
    """A server frame's locals that remember what the run pushed back."""

    pushed: dict

    def update(self, *args: Any, **kwargs: Any):
        new = dict(*args, **kwargs)
        self.pushed = {**getattr(self, "pushed", {}), **new}
        super().update(new)


def serialize_request(tracer: Any) -> bytes:
    """The uncompressed payload a request sends (nnsight's environment pulled first)."""
    # private path, looked up on use (module docstring)
    from nnsight.ndif import pull_env
    from nnsight.schema.request import RequestModel

    pull_env()
    return RequestModel.serialize(tracer, compress=False)


def _recording_unpickler(refs: list):
    """The nnsight unpickler, recording each ``(kind, module, name)`` it loads into ``refs``."""
    # private path, looked up on use (module docstring)
    from nnsight.intervention.serialization import CustomCloudUnpickler

    def recording(kind: str, function: Callable[..., Any]):
        def wrapper(name: str, *args: Any):
            refs.append((kind, name, ""))
            return function(name, *args)

        return wrapper

    class Recording(CustomCloudUnpickler):
        def find_class(self, module: str, name: str):
            refs.append(("find_class", module, name))
            found = super().find_class(module, name)
            if module == "cloudpickle.cloudpickle" and name in ("subimport", "dynamic_subimport"):
                return recording(name, found)
            return found

    return Recording


def deserialize_request(blob: bytes, nnsight_model: Any, tracer: Any, refs: list):
    """Unpickle a request as the server would, recording what it names into ``refs``."""
    # private paths, looked up on use (module docstring)
    from cloudpickle import cloudpickle
    from nnsight.schema.request import RequestModel

    # cloudpickle unpickles a class it pickled in this process into that same class, setting
    # the server's rebuilt methods on it (without a module, so every later pickle searches
    # sys.modules for them). The server is another process: its classes are built fresh.
    filename = tracer.info.frame.f_code.co_filename
    with _SWAP:
        tracked = dict(cloudpickle._DYNAMIC_CLASS_TRACKER_BY_ID)
        cloudpickle._DYNAMIC_CLASS_TRACKER_BY_ID.clear()
        # unpickling replaces the trace body's source in linecache: ours is put back
        saved = linecache.cache.get(filename)
        try:
            return RequestModel.deserialize(
                blob,
                nnsight_model._remoteable_persistent_objects(),
                compress=False,
                unpickler=_recording_unpickler(refs),
            )
        finally:
            cloudpickle._DYNAMIC_CLASS_TRACKER_BY_ID.clear()
            cloudpickle._DYNAMIC_CLASS_TRACKER_BY_ID.update(tracked)
            if saved is not None:
                linecache.cache[filename] = saved
            else:
                linecache.cache.pop(filename, None)


def apply_request_env(nnsight_model: Any, env: dict) -> None:
    """Apply a request's per-request settings (attention implementation) as NDIF does."""
    nnsight_model._remoteable_set_env(env)


def execute(restored: Any) -> dict:
    """Run a deserialized trace's body; return the values it pushed back (saved only)."""
    frame = restored.info.frame
    frame.f_locals = _Recorder(frame.f_locals)
    restored.execute(restored.info.code)
    return getattr(frame.f_locals, "pushed", {})


def deliver(tracer: Any, values: dict) -> None:
    """Hand a server's saved values to the client's trace, as a remote result is."""
    # private path, looked up on use (module docstring)
    from nnsight.tracing.tracer import mark
    from nnsight.tracing.util import push

    for value in values.values():
        mark(value)
    push(tracer.info.frame, values)


def submit(
    nnsight_model: Any, tracer: Any, *, timeout: float | None = None, show_status: bool = True
):
    """Send one request to NDIF with nnsight's own remote backend and wait for it.

    ``timeout``: give up once the server has been silent that long (nnsight 0.8.1 would
    wait as long as the job runs).
    """
    backend = nnsight_model._remote_backend(True, True, None, False)
    if not show_status:
        backend.display.enabled = False
    if timeout is None:
        return backend(tracer)
    # heavy: the websocket client loads on the remote path only
    import websocket

    heard = [time.monotonic()]
    parse, refresh = backend.parse, backend.display.refresh

    def parsed(message: Any):
        heard[0] = time.monotonic()
        return parse(message)

    def refreshed():
        if time.monotonic() - heard[0] > timeout:
            raise TimeoutError(f"the server sent nothing for {timeout:g} s")
        refresh()

    backend.parse, backend.display.refresh = parsed, refreshed
    before = websocket.getdefaulttimeout()
    websocket.setdefaulttimeout(timeout)  # the socket nnsight opens in the call
    try:
        return backend(tracer)
    finally:
        websocket.setdefaulttimeout(before)


def job_failed() -> type[Exception]:
    """The exception nnsight raises when an NDIF job fails on the server."""
    # private path, looked up on use (module docstring)
    from nnsight.intervention.backends.remote import RemoteError

    return RemoteError


def hub_id_cache() -> dict[str, str]:
    """The nnsight cache of canonical Hub ids (what NDIF deployments are keyed by)."""
    # private path, looked up on use (module docstring)
    from nnsight.modeling.huggingface import _ID_CACHE

    return _ID_CACHE


def underlying_module(envoy: Any):
    """The ``transformers`` model inside an nnsight ``TransformersModel``."""
    return envoy._module
