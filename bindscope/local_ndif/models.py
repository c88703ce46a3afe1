"""The embedded models in the Hugging Face cache layout, and their deploy specs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path


def place(hub_cache: Path, repo_id: str, folder: Path) -> Path:
    """Link ``folder``'s files as ``repo_id``'s snapshot in ``hub_cache``; the snapshot.

    A repo already in the cache that is not ours (a real download) is left alone.
    """
    root = hub_cache / ("models--" + repo_id.replace("/", "--"))  # the Hub cache's layout
    revision = hashlib.sha1(f"bindscope:{folder.resolve()}".encode()).hexdigest()
    snapshot = root / "snapshots" / revision
    ref = root / "refs" / "main"
    if ref.is_file() and ref.read_text().strip() != revision:
        return root / "snapshots" / ref.read_text().strip()
    snapshot.mkdir(parents=True, exist_ok=True)
    for source in folder.iterdir():
        if source.is_file():
            link = snapshot / source.name
            link.unlink(missing_ok=True)
            link.symlink_to(source.resolve())
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(revision)
    return snapshot


def specs(hub_cache: Path, folders: Mapping[str, Path], *, trusted: bool) -> list[dict]:
    """Ndif deploy specs: float32 (the server's default is bfloat16), sized from the files."""
    found = []
    for repo_id, folder in folders.items():
        snapshot = place(hub_cache, repo_id, folder)
        size = sum(p.stat().st_size for p in snapshot.glob("*.safetensors"))
        found.append(
            {
                "checkpoint": repo_id,
                "dtype": "float32",
                "size_bytes": size,
                "trusted": trusted,
                "pinned": True,
            }
        )
    return found
