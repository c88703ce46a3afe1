"""``bindscope c5 --preset powered``: what the preset expands to, checked without a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from bindscope import cli
from bindscope.errors import InputError
from bindscope.experiments.c5 import DEFINITION
from bindscope.metrics.stats.frontier import TAIL_CALIBRATED_SETS, reaches
from bindscope.prompts import load


def _parsed(tmp_path: Path, *flags: str):
    return cli.parser().parse_args(["c5", "--out", str(tmp_path), *flags])


def test_the_powered_preset_expands_to_its_design(tmp_path: Path) -> None:
    """All recognition items, random + layer-matched nulls to p 0.005 (the tail p, from the
    fewest sets at which it is calibrated), three models."""
    args = _parsed(tmp_path, "--preset", "powered")
    options = cli._options(DEFINITION, args)
    canonical = load("canonical")
    recognition = [r.key for r in canonical if r.task == "recognition"]
    assert [r.key for r in options.prompts] == recognition and len(recognition) == 205
    assert [r.key for r in options.ranking] == [r.key for r in canonical]
    assert options.sampling == "sequential" and options.matched_layers
    assert options.n_random == TAIL_CALIBRATED_SETS and options.k == 4
    assert reaches(0.005, options.n_random, tail=True)
    assert "powered" in (options.design or "")
    assert cli._model_specs(DEFINITION, args) == [None, "gemma-3-270m", "qwen2.5-coder-0.5b"]


def test_a_flag_at_the_presets_value_or_another_model_is_taken(tmp_path: Path) -> None:
    args = _parsed(tmp_path, "--preset", "powered", "--n-random", "99", "--model", "x")
    assert cli._options(DEFINITION, args).n_random == 99
    assert cli._model_specs(DEFINITION, args) == ["x"]


def test_a_flag_that_contradicts_the_preset_is_refused(tmp_path: Path) -> None:
    args = _parsed(tmp_path, "--preset", "powered", "--n-random", "10")
    with pytest.raises(InputError, match=r"--preset powered sets n_random; --n-random 10"):
        cli._options(DEFINITION, args)


def test_without_a_preset_nothing_changes(tmp_path: Path) -> None:
    args = _parsed(tmp_path)
    options = cli._options(DEFINITION, args)
    assert options.n_random == 199 and not options.matched_layers
    assert cli._model_specs(DEFINITION, args) == [None]
