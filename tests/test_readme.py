"""The README's Python blocks run, in order, sharing one namespace (pytest-examples).

Offline and fast they run on the tiny Llama (``bindscope.load_model()`` returns it); the
slow variant runs them on the embedded SmolLM2. Blocks marked ``test="skip"`` need the Hub.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_examples import find_examples

import bindscope
from bindscope import families, runners
from tests.conftest import build_tiny

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
