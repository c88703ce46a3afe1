"""The simulated remote layer's shared fixture: a local model and its simulated-NDIF twin."""

from __future__ import annotations

import pytest

import bindscope.remote as remote
from tests.conftest import build_tiny

FAMILIES = ["llama", "gpt2", "gpt_neox"]  # GQA + BOS, absolute positions, embed_out rename


def simulated_twin(local, byte_tokenizer, sp_tokenizer):
    """``(local, simulated remote)``: a second copy of ``local``'s family with the same
    weights (build_tiny seeds by family), its traces run through ``SimulatedServer``."""
    tok = sp_tokenizer if local.family == "llama" else byte_tokenizer
    simulated = remote.simulate(build_tiny(local.family, tok, self_check=False))
    remote.probe_capture(simulated)
    return local, simulated


@pytest.fixture(scope="module", params=FAMILIES)
def twins(request, byte_tokenizer, sp_tokenizer):
    """``simulated_twin`` per family of ``FAMILIES`` (a module narrows them with
    ``pytest.mark.parametrize("twins", [...], indirect=True)``)."""
    tok = sp_tokenizer if request.param == "llama" else byte_tokenizer
    return simulated_twin(build_tiny(request.param, tok), byte_tokenizer, sp_tokenizer)
