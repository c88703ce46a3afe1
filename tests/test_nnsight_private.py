"""nnsight's private API is used in one module only, so an nnsight upgrade touches one file."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import bindscope
from bindscope import nnsight_private

PRIVATE = re.compile(
    r"_remote_backend|_remoteable_|CustomCloudUnpickler|RequestModel|pull_env|_ID_CACHE"
    r"|f_locals|\._module\b|nnsight\.(?:tracing|intervention|schema|modeling|ndif)\b"
)


def test_private_nnsight_names_live_only_in_the_adapter():
    package = Path(bindscope.__file__).parent
    # the server-side modules run inside the local NDIF server's own venv, patching the
    # nnsight pinned there (docs/remote.md); bindscope's adapter is not theirs to use
    server_side = package / "local_ndif" / "ndif_side"
    adapter = Path(nnsight_private.__file__)
    found = [
        f"{path.relative_to(package)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path != adapter and server_side not in path.parents
        for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1)
        if PRIVATE.search(line)
    ]
    assert found == [], "move these into bindscope/nnsight_private.py:\n" + "\n".join(found)
    assert PRIVATE.search(adapter.read_text("utf-8"))  # the pattern still sees what it guards
    assert "0.8.1" in adapter.read_text("utf-8").split('"""')[1]  # the version it was written for


def test_two_threads_deserializing_at_once_each_get_their_own_classes(monkeypatch):
    from cloudpickle import cloudpickle
    from nnsight.schema.request import RequestModel

    tracker = cloudpickle._DYNAMIC_CLASS_TRACKER_BY_ID
    before = dict(tracker)
    done = {"a": threading.Event(), "b": threading.Event()}
    rebuilt = {b"a": type("A", (), {}), b"b": type("B", (), {})}

    def deserialize(blob: bytes, *args: object, **kwargs: object) -> list:
        tracker[blob] = rebuilt[blob]  # a class this request rebuilt (the tracker holds it weakly)
        other = "b" if blob == b"a" else "a"
        done[other].wait(0.5)  # the other request would clear it now, unless they take turns
        return list(tracker)

    def run(blob: bytes) -> None:
        tracer = SimpleNamespace(info=SimpleNamespace(frame=sys._getframe()))
        model = SimpleNamespace(_remoteable_persistent_objects=dict)
        results[blob] = nnsight_private.deserialize_request(blob, model, tracer, [])
        done[blob.decode()].set()

    monkeypatch.setattr(RequestModel, "deserialize", staticmethod(deserialize))
    results: dict = {}
    threads = [threading.Thread(target=run, args=(blob,)) for blob in (b"a", b"b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {b"a": [b"a"], b"b": [b"b"]}
    assert tracker == before
