"""Fixtures for experiment tests: a tiny model and prompt files in its vocabulary."""

from __future__ import annotations

import pytest

from tests.conftest import build_tiny
from tests.experiments import prompts_tiny


@pytest.fixture(scope="module")
def tiny_llama(sp_tokenizer):
    return build_tiny("llama", sp_tokenizer)


@pytest.fixture
def tiny_prompts(tmp_path):
    return prompts_tiny.write(tmp_path)


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
