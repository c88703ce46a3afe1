"""The README's Python blocks run, in order, sharing one namespace (pytest-examples), and so do
the lines of its TransformerLens / nnterp table.

Offline and fast they run on the tiny Llama (``bindscope.load_model()`` returns it); the
slow variant runs them on the embedded SmolLM2. Blocks marked ``test="skip"`` need the Hub.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pytest_examples import find_examples

import bindscope
from bindscope import families, runners
from tests.conftest import _tiny, build_tiny

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLES = [e for e in find_examples(str(README)) if e.prefix.split()[0] in ("py", "python")]


def _run_all(eval_example):
    shared: dict = {}
    ran = 0
    registered = list(families._REGISTERED)
    try:
        for example in EXAMPLES:
            if example.prefix_settings().get("test") == "skip":
                continue
            shared.update(eval_example.run(example, module_globals=dict(shared)))
            ran += 1
    finally:
        families._REGISTERED[:] = registered  # the README registers a family
    assert ran >= 4


def test_readme_blocks_run_on_a_tiny_model(eval_example, monkeypatch, sp_tokenizer):
    tiny = build_tiny("llama", sp_tokenizer)
    load = bindscope.load_model

    def load_model(model=None, **kwargs):
        return tiny if model is None else load(model, **kwargs)

    monkeypatch.setattr(bindscope, "load_model", load_model)
    _run_all(eval_example)


@pytest.mark.slow
def test_readme_blocks_run_on_the_default_model(eval_example):
    _run_all(eval_example)


def test_readme_imports_runners_from_their_face():
    """issue 42: the edge-circuit functions are on ``bindscope.runners``, and the README
    imports every runner from there, never from a submodule."""
    circuit = ("edge_attribution", "path_patching", "faithfulness", "top_mask", "verify")
    assert set(circuit) <= set(runners.__all__)
    source = "\n".join(e.source for e in EXAMPLES)
    assert "from bindscope.runners." not in source


TL_TABLE = re.compile(r"<!-- tl-table -->\n(.*?)\n<!-- /tl-table -->", re.S)
TL_HEADER = "| TransformerLens / nnterp | bindscope | one line |"
TL_PROMPTS = [
    "Captions and audio description help deaf and blind users.",
    "Captions and audio description help blind and deaf users.",
]


def tl_rows(text: str) -> list[tuple[str, str, str]]:
    """The TransformerLens table's rows: (their name, bindscope's, the line of code)."""
    found = TL_TABLE.search(text)
    assert found, "README.md has no <!-- tl-table --> ... <!-- /tl-table --> table"
    header, _rule, *lines = found.group(1).splitlines()
    assert header == TL_HEADER, header
    rows = []
    for line in lines:
        # the code is the last cell: one backticked line (a `|` inside it would split cells)
        cells = re.fullmatch(r"\| (.+?) \| (.+?) \| `([^`]+)` \|", line)
        assert cells, f"tl-table row is not '| theirs | ours | `code` |': {line}"
        rows.append(cells.groups())
    return rows


def run_tl_rows(rows: list[tuple[str, str, str]], namespace: dict) -> None:
    """Each row's line in order in ``namespace``; the first that raises fails, named."""
    for number, (theirs, ours, code) in enumerate(rows, 1):
        try:
            exec(compile(code, f"<README tl-table row {number}>", "exec"), namespace)
        except Exception as exc:  # any failure names its row
            pytest.fail(f"README tl-table row {number} ({theirs} -> {ours}): {code}\n{exc!r}")


def test_tl_table_rows_run_in_order(byte_tokenizer, sp_tokenizer):
    """issue 44: every row of the TransformerLens / nnterp table runs, in table order, in one
    namespace holding ``model``, ``prompts``, ``bs`` and the names of the interventions."""
    from bindscope import interventions

    rows = tl_rows(README.read_text())
    assert len(rows) >= 10
    namespace = {name: getattr(interventions, name) for name in interventions.__all__}
    namespace.update(model=_tiny("llama", byte_tokenizer, sp_tokenizer), prompts=TL_PROMPTS)
    namespace["bs"] = bindscope
    run_tl_rows(rows, namespace)


def test_tl_table_harness_names_a_failing_row():
    """Rows share one namespace, and a broken line fails naming its row."""
    table = f"<!-- tl-table -->\n{TL_HEADER}\n|---|---|---|\n"
    good = "| `a` | `b` | `x = 1` |\n| `c` | `d` | `y = x + 1` |\n"
    rows = tl_rows(table + good + "| `e` | `f` | `z = w` |\n<!-- /tl-table -->")
    assert [code for *_, code in rows] == ["x = 1", "y = x + 1", "z = w"]
    namespace: dict = {}
    with pytest.raises(pytest.fail.Exception, match=r"row 3 \(`e` -> `f`\): z = w"):
        run_tl_rows(rows, namespace)
    assert namespace["y"] == 2
