"""Shared fixture: each family's linearised tiny model (see test_attribution_patching)."""

from __future__ import annotations

import pytest

from tests.conftest import FAMILY_NAMES
from tests.runners.test_attribution_patching import linearised


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def flat(request, byte_tokenizer, sp_tokenizer):
    tok = sp_tokenizer if request.param == "llama" else byte_tokenizer
    model = linearised(request.param, tok)
    model.hf.requires_grad_(True)
    return model
