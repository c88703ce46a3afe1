"""A new experiment is one module in experiments/ and one in figures/ (and its tests).

The worked example in ``tests/house`` (prompt lengths in tokens) is put beside the package's
own modules; the command line, the schema, ``summarize`` and the report find it with no
other change.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import bindscope.experiments
import bindscope.figures
from bindscope import cli
from bindscope.experiments.kit import registry
from bindscope.figures.sections import sections
from bindscope.prompts import load

HOUSE = Path(__file__).parents[1] / "house"


def _forget() -> None:
    registry.definitions.cache_clear()
    sections.cache_clear()
    for name in ("bindscope.experiments.lengths", "bindscope.figures.lengths"):
        sys.modules.pop(name, None)


@pytest.fixture
def with_lengths(monkeypatch):
    """The worked example beside the package's experiments and figures, for one test."""
    for package, folder in ((bindscope.experiments, "experiments"), (bindscope.figures, "figures")):
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(HOUSE / folder)])
    _forget()
    yield
    _forget()


def test_a_new_experiment_needs_only_its_two_modules(
    with_lengths, loads, tiny_llama, tiny_prompts, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["lengths", "--prompts", str(tiny_prompts), "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 0
    assert loads  # the command line loaded the model as for any experiment
    records = load(tiny_prompts).records
    assert registry.validate_file(out / "lengths" / "records.jsonl") == len(records)
    expected = np.mean([len(tiny_llama.tokenize(r.template)) for r in records])
    assert f"{expected:.1f} tokens on average" in capsys.readouterr().out
    assert cli.main(["summarize", str(out)]) == 0
    assert "lengths: " in capsys.readouterr().out
    assert cli.main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "## Prompt lengths" in report and "figures/lengths.png" in report


def test_the_example_is_gone_without_its_modules():
    assert "lengths" not in registry.definitions()
    assert "lengths" not in sections()
