"""Property-based: any prompt file either loads correctly or raises a PromptFileError."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bindscope.errors import BindscopeError
from bindscope.prompts import load
from bindscope.prompts.spans import find_term_chars

SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

words = st.text(min_size=1, max_size=12)


@st.composite
def records(draw):
    """Records close to valid: each field is right, and one in twenty is anything at all."""

    def field(good):
        return draw(json_values if draw(st.integers(0, 19)) == 0 else good)

    term = draw(words | st.sampled_from(["screen reader", "alt text", "読み上げ", "ß-Straße"]))
    task = field(st.sampled_from(["recognition", "generation"]))
    around = st.text(st.characters(codec="utf-8"), max_size=12)
    template = field(st.builds(lambda a, b: f"{a} {term} {b}", around, around))
    choices = field(st.lists(words, min_size=2, max_size=4))
    out = {
        "prompt_id": field(
            st.sampled_from(["rec_001", "gen_001", "a/b", "x|y"] + [f"p{i}" for i in range(20)])
        ),
        "term": field(st.just(term)),
        "task": task,
        "template": template,
        "choices": choices,
        "answer_idx": field(
            st.integers(0, max(1, len(choices) if isinstance(choices, list) else 1) - 1)
        ),
        "max_tokens": field(st.integers(1, 8)),
    }
    if draw(st.integers(0, 7)) == 0:
        out.pop(draw(st.sampled_from(sorted(out))))
    if draw(st.booleans()):
        out["control_group"] = field(st.none() | words)
    return out


line = records().map(lambda r: json.dumps(r, ensure_ascii=False))
lines = st.lists(line, max_size=6) | st.lists(
    line | json_values.map(json.dumps) | st.text(max_size=30), max_size=6
)
encodings = st.sampled_from(["utf-8"] * 5 + ["utf-8-sig", "utf-16", "latin-1", "shift_jis"])


def _check(path: Path) -> None:
    try:
        pset = load(path)
    except BindscopeError as exc:
        event("refused: " + str(exc).split(": ", 1)[-1][:25])  # --hypothesis-show-statistics
        return
    event("loaded")
    assert len(pset) > 0
    keys = [r.key for r in pset]
    assert len(keys) == len(set(keys))
    for r in pset:
        assert r.task in ("recognition", "generation")
        assert find_term_chars(r.template, r.term) is not None
        if r.task == "recognition":
            assert 0 <= r.answer_idx < len(r.choices)
        else:
            assert isinstance(r.max_tokens, int) and r.max_tokens >= 1


@SETTINGS
@given(lines=lines, encoding=encodings, newline=st.sampled_from(["\n", "\r\n"]))
def test_any_prompt_file_loads_or_raises_a_bindscope_error(lines, encoding, newline):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.jsonl"
        path.write_bytes(newline.join(lines).encode(encoding, errors="replace"))
        _check(path)


@SETTINGS
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_load_or_raise_a_bindscope_error(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.jsonl"
        path.write_bytes(data)
        _check(path)


@SETTINGS
@given(term=words, before=st.text(max_size=10), after=st.text(max_size=10))
def test_unicode_terms_in_their_templates(term, before, after):
    """A term written in its template with spaces around it loads, or is refused clearly."""
    row = {"prompt_id": "gen_001", "term": term, "task": "generation",
           "template": f"{before} {term} {after}", "max_tokens": 3}  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.jsonl"
        path.write_text(json.dumps(row) + "\n", "utf-8")
        _check(path)
