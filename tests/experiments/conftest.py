"""Fixtures for experiment tests: a tiny model and prompt files in its vocabulary."""

from __future__ import annotations

import pytest

from bindscope.experiments import c5
from tests.conftest import build_tiny
from tests.experiments import prompts_tiny


@pytest.fixture(scope="module")
def tiny_llama(sp_tokenizer):
    return build_tiny("llama", sp_tokenizer)


@pytest.fixture
def tiny_prompts(tmp_path):
    return prompts_tiny.write(tmp_path)


@pytest.fixture
def tiny_c5(tiny_llama, tiny_prompts, tmp_path):
    """Runs C5 small on the tiny prompts: k=2, three random sets, the tiny rubric, into tmp_path.

    ``tiny_c5(models=tiny_llama, **options)`` returns the summary; options override those.
    """

    def run(models=None, **options):
        given = {"k": 2, "n_random": 3, "rubric": prompts_tiny.RUBRIC, **options}
        models = tiny_llama if models is None else models
        return c5.run(models, prompts=tiny_prompts, out=tmp_path, progress=False, **given)

    return run


@pytest.fixture
def tiny_controls(tmp_path):
    return prompts_tiny.write(tmp_path, prompts_tiny.control_rows(), name="controls.jsonl")


@pytest.fixture
def loads(monkeypatch, tiny_llama):
    """Counts model loads; the tiny model stands in for the real one."""
    from bindscope import cli

    calls = []

    def load(*args, **kwargs):
        calls.append(args)
        return tiny_llama

    monkeypatch.setattr(cli, "_load", load)
    return calls
