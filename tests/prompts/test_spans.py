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


@pytest.mark.parametrize(
    ("text", "term", "expected"),
    [
        # Spelling variants the builder used to refuse: hyphens and runs of spaces join words.
        ("A screen-reader is", "screen reader", "screen-reader"),
        ("A screen  reader is", "screen reader", "screen  reader"),
        ("the alt-text field", "alt text", "alt-text"),
        ("screen readers' voices", "screen reader", "screen readers"),
        # Scripts without spaces between words: the term touches the next letter.
        ("質問: 読み上げソフトは何をしますか？", "読み上げソフト", "読み上げソフト"),
        ("问题：屏幕阅读器是做什么的？", "屏幕阅读器", "屏幕阅读器"),
        ("โปรแกรมอ่านหน้าจอคืออะไร", "โปรแกรมอ่านหน้าจอ", "โปรแกรมอ่านหน้าจอ"),
        ("스크린 리더는 무엇인가요?", "스크린 리더", "스크린 리더"),
        ("使用screen reader时", "screen reader", "screen reader"),
        # Accents and Cyrillic, any case; decomposed text matches a composed term.
        ("Un LECTEUR D'ÉCRAN lit la page.", "lecteur d'écran", "LECTEUR D'ÉCRAN"),
        ("Un lecteur d'e\u0301cran lit la page.", "lecteur d'écran", "lecteur d'e\u0301cran"),
        ("Экранный диктор читает текст.", "экранный диктор", "Экранный диктор"),
    ],
)
def test_matcher_finds(text, term, expected):
    start, end = find_term_chars(text, term)
    assert text[start:end] == expected


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("x-screen reader", "screen reader"),  # part of a hyphenated word
        ("screen readers-only mode", "screen reader"),
        ("préécran", "écran"),
        ("дикторская", "диктор"),
        ("e\u0301cran", "cran"),  # would split e from its accent
        ("กรี", "กร"),  # would split a Thai consonant from its vowel sign
        ("no term here", ""),
    ],
)
def test_matcher_refuses(text, term):
    assert find_term_chars(text, term) is None


def test_span_in_a_script_without_spaces(byte_tokenizer):
    # Only the byte-level tokenizer can spell Japanese; the test SentencePiece one drops it.
    model = build_tiny("qwen2", byte_tokenizer, self_check=False)
    text = "質問: 読み上げソフトは何をしますか？"
    span = locate(model, text, "読み上げソフト")
    ids = model.tokenize(text)
    assert span.chars == (4, 11)
    assert model.tokenizer.decode([ids[i] for i in span.indices]) == "読み上げソフト"


def test_the_prompt_builder_uses_this_matcher(monkeypatch):
    import importlib.util
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "tools" / "build_prompts.py"
    if not script.exists():
        pytest.skip("tools/ not present (installed package)")
    spec = importlib.util.spec_from_file_location("build_prompts", script)
    builder = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "build_prompts", builder)  # dataclasses look it up
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script prepends its checkout
    spec.loader.exec_module(builder)
    for text, term in [
        ("A screen-reader is", "screen reader"),
        ("A screen  reader is", "screen reader"),
        ("the alt-text field", "alt text"),
        ("質問: 読み上げソフトは何をしますか？", "読み上げソフト"),
    ]:
        assert builder.find_span(text, term, []) == find_term_chars(text, term)
    with pytest.raises(ValueError, match="not found"):
        builder.find_span("x-screen reader", "screen reader", [])
