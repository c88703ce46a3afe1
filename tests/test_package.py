"""``import bindscope`` is cheap, and every subpackage is one attribute away."""

from __future__ import annotations

import subprocess
import sys

import bindscope


def test_subpackages_are_reached_lazily_from_the_root():
    code = (
        "import sys, bindscope; "
        "heavy = [m for m in ('torch', 'nnsight', 'transformers') if m in sys.modules]; "
        "print(','.join(heavy)); "
        "bindscope.prompts.load; bindscope.metrics.bsi_from_probs; bindscope.load_model"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""  # nothing heavy imported by ``import bindscope`` alone


def test_unknown_attribute_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        bindscope.nothing  # noqa: B018
    assert {"metrics", "prompts", "load_model"} <= set(dir(bindscope))
