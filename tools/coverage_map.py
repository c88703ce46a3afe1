"""Write docs/testing.md's coverage map: each test file, what it checks, in which pass, on
which families. Run it after adding or moving tests:

    .venv/bin/python tools/coverage_map.py

It collects the whole suite, live layer included (nothing runs), and reads each test's
marks, fixtures and parameters; the first line of each module's docstring says what it checks.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- coverage map: begin -->", "<!-- coverage map: end -->"
sys.path.insert(0, str(ROOT))

from tests.conftest import FAMILY_NAMES, LAYOUTS  # noqa: E402

PASSES = ("make test", "live, trusted", "live, sandboxed", "browser", "GPU only")
REAL = {"smollm2": "SmolLM2", "gemma3_real": "Gemma 3", "qwen_real": "Qwen2.5"}


class _Collector:
    def __init__(self) -> None:
        self.files: dict[str, dict] = defaultdict(
            lambda: {"n": 0, "passes": set(), "families": defaultdict(set), "real": set()}
        )

    def pytest_collection_modifyitems(self, items) -> None:
        for item in items:
            entry = self.files[item.nodeid.split("::")[0]]
            entry["n"] += 1
            marks = {m.name for m in item.iter_markers()}
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "ndif_live" in marks:
                entry["passes"].add("live, trusted")
                if params.get("mode") == "sandboxed":
                    entry["passes"].add("live, sandboxed")
            elif "browser" in marks:
                entry["passes"].add("browser")
            elif "cuda" in marks:
                entry["passes"].add("GPU only")
            else:
                entry["passes"].add("make test")
            test = item.nodeid.split("[")[0]
            entry["families"][test] |= {v for v in params.values() if v in FAMILY_NAMES}
            entry["real"] |= {REAL[f] for f in item.fixturenames if f in REAL}
            if "twins" in item.fixturenames and "ndif_live" in marks:
                entry["real"] |= {"SmolLM2", "Gemma 3"}


def _families(by_test: dict[str, set[str]]) -> str:
    """The families a file's tests run on: "all 13", "6 layouts", or names; ";" between
    the groups when its tests differ."""
    said = []
    for found in by_test.values():
        if not found:
            continue
        if found == set(FAMILY_NAMES):
            text = "all 13"
        elif found == set(LAYOUTS):
            text = "6 layouts"
        else:
            text = ", ".join(sorted(found))
        if text not in said:
            said.append(text)
    return "; ".join(said)


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def table() -> str:
    """The coverage map as a Markdown table."""
    collector = _Collector()
    code = pytest.main(
        ["--collect-only", "-q", "-o", "addopts=", "-p", "no:cacheprovider", str(ROOT / "tests")],
        plugins=[collector],
    )
    if code != 0:
        raise SystemExit(f"collection failed (pytest exit {code})")
    rows = [
        "| test file | tests | pass | families | real models | what it checks |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(collector.files):
        entry = collector.files[name]
        rows.append(
            f"| `{name}` | {entry['n']} | {', '.join(p for p in PASSES if p in entry['passes'])} "
            f"| {_families(entry['families'])} | {', '.join(sorted(entry['real']))} "
            f"| {_summary(ROOT / name)} |"
        )
    return "\n".join(rows)


def main() -> None:
    """Replace the map between the markers in docs/testing.md."""
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + table() + "\n" + text[end:])
    print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
