"""Where the package's prompt data lives, and reading its JSON files."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path


def data_path(name: str) -> Path:
    """Path of a file in the package's prompt data folder."""
    return Path(str(resources.files("bindscope.prompts") / "data" / name))


def load_json(name: str) -> dict:
    """One of the package's JSON data files (rubrics, exemplars, aliases)."""
    return json.loads(data_path(name).read_text("utf-8"))
