"""``redact``: the API key never shows, and a short key does not rewrite other words."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bindscope.remote.transport import MIN_KEY_LENGTH, redact

# keys as NDIF issues them and as people type them for a local server: token characters
KEY_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
SHORT = st.text(KEY_CHARS, min_size=1, max_size=MIN_KEY_LENGTH - 1)
LONG = st.text(KEY_CHARS, min_size=MIN_KEY_LENGTH, max_size=40)
TEXT = st.text(max_size=80)
SEPARATORS = st.sampled_from([" ", "=", ": ", "\n", "'", '"', "/", "&", "(", ")", ","])


def _redacted(key: str, text: str) -> str:
    """``redact(text)`` with ``key`` configured (in the environment; nnsight's config empty)."""
    from nnsight import CONFIG

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NDIF_API_KEY", key)
        patch.setattr(CONFIG.API, "APIKEY", None)
        return redact(text)


@given(LONG, TEXT, TEXT)
def test_a_long_key_never_survives_wherever_it_is(key, before, after):
    out = _redacted(key, before + key + after)
    assert key not in out and "***" in out


@given(SHORT, st.lists(st.tuples(TEXT, SEPARATORS), max_size=4), SEPARATORS)
def test_a_short_key_standing_alone_never_survives(key, parts, end):
    text = "".join(f"{words}{sep}{key}" for words, sep in parts) + end + key
    out = _redacted(key, text)
    alone = rf"(?<![\w-]){re.escape(key)}(?![\w-])"
    assert re.search(alone, out) is None and out.endswith("***"), (key, text, out)


@given(SHORT, st.lists(st.text(KEY_CHARS, min_size=1, max_size=12), max_size=8))
def test_a_short_key_leaves_longer_words_alone(key, words):
    words = [w for w in words if w != key]  # only the key itself may go
    text = " ".join(words)
    assert _redacted(key, text) == text


def test_a_one_letter_key_goes_only_where_it_stands_alone():
    # a substring rule (the old one) gave "inde*** out of range: key=***, ***-ray (***)"
    text = "index out of range: key=x, x-ray (x)"
    assert _redacted("x", text) == "index out of range: key=***, x-ray (***)"
