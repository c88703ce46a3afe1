"""nnsight's private API is used in one module only, so an nnsight upgrade touches one file."""

from __future__ import annotations

import re
from pathlib import Path

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
