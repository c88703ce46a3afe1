"""Span finding on hand-made cases for each tokenizer style."""

from __future__ import annotations

import pytest

from bindscope.errors import SpanNotFoundError
from bindscope.prompts import find_term_chars, locate
from tests.conftest import build_tiny


@pytest.fixture(scope="module", params=["byte", "sentencepiece"])
def model(request, byte_tokenizer, sp_tokenizer):
    tok = byte_tokenizer if request.param == "byte" else sp_tokenizer
    return build_tiny("qwen2", tok, self_check=False)


def covered_text(model, text, span):
    _, offsets = model.tokenize(text, offsets=True)
    return text[offsets[span.indices[0]][0] : offsets[span.indices[-1]][1]].strip().lstrip("▁")


@pytest.mark.parametrize(
    ("text", "term", "expected"),
    [
        ("In web accessibility, a screen reader is", "screen reader", "screen reader"),
        ("Screen readers announce headings.", "screen reader", "Screen readers"),  # capital, plural
        ("To use ARIA attributes correctly, developers", "aria attribute", "ARIA attributes"),
        ("Alternative text describes an image for people", "alt text", "Alternative text"),
        ("Developers should test landmark regions", "landmark region", "landmark regions"),
    ],
)
def test_span_covers_exactly_the_term(model, text, term, expected):
    span = locate(model, text, term)
    assert covered_text(model, text, span) == expected
    ids = model.tokenize(text)
    decoded = model.tokenizer.decode([ids[i] for i in span.indices]).strip()
    assert decoded.lower() == expected.lower()


def test_term_at_position_zero_is_flagged(model):
    span = locate(model, "Alt text describes an image", "alt text")
    if model.prepend_bos:
        assert span.indices[0] == 1 and "bos" in span.flags
    else:
        assert span.indices[0] == 0 and "at_position_0" in span.flags


def test_absent_term_raises_with_prompt_term_and_text(model):
    with pytest.raises(SpanNotFoundError) as err:
        locate(model, "The quick brown fox", "skip link", prompt_id="skip link/gen_002")
    message = str(err.value)
    assert (
        "skip link/gen_002" in message and "'skip link'" in message and "quick brown fox" in message
    )


def test_word_boundaries():
    assert find_term_chars("noskip link here", "skip link") is None
    assert find_term_chars("skip linked", "skip link") is None
    assert find_term_chars("a skip-link and", "skip link") == (2, 11)
    assert find_term_chars("the non-text content rule", "non-text content") == (4, 20)
