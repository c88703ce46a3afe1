"""docs/tutorial.md's Python blocks run, in order, sharing one namespace, on a tiny model."""

from __future__ import annotations

from pathlib import Path

from pytest_examples import find_examples

import bindscope
from tests.conftest import build_tiny

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
EXAMPLES = [e for e in find_examples(str(TUTORIAL)) if e.prefix.split()[0] in ("py", "python")]


def test_tutorial_blocks_run_on_a_tiny_model(eval_example, monkeypatch, sp_tokenizer, tmp_path):
    from tests.experiments import prompts_tiny

    tiny = build_tiny("llama", sp_tokenizer)
    monkeypatch.setattr(bindscope, "load_model", lambda model=None, **kwargs: tiny)
    shared: dict = {"PROMPTS": prompts_tiny.write(tmp_path)}
    for example in EXAMPLES:
        shared.update(eval_example.run(example, module_globals=dict(shared)))
    assert len(EXAMPLES) == 4
    assert shared["figures"].figures and shared["summary"]["experiment"] == "scan"
