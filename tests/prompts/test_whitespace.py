"""One whitespace convention for every file kind (issue 28, item 1).

A continuation (a choice, a target, a pair's answers) is written without leading whitespace
and follows its prompt after one space. The trap this closes: a 10-item file whose choices
were written " True" / " False" was scored as double-space text, with no word from anyone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bindscope.errors import PromptFileError
from bindscope.experiments import patching, scan
from bindscope.prompts import load
from bindscope.prompts.continuations import continuation_ids
from tests.conftest import build_tiny

ROOT = Path(__file__).resolve().parents[2]


def ten_items(choices=(" True", " False")) -> list[dict]:
    """The newcomer's file: ten True/False items on two terms."""
    terms = ["screen reader", "skip link"]
    return [
        {
            "prompt_id": f"tf_{i:02d}",
            "term": terms[i % 2],
            "task": "recognition",
            "template": f"True or False: a {terms[i % 2]} helps keyboard users ({i}).\nAnswer:",
            "choices": list(choices),
            "answer_idx": i % 2,
        }
        for i in range(10)
    ]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_leading_spaces_in_choices_are_refused_naming_file_line_and_field(tmp_path):
    path = _write(tmp_path / "mine.jsonl", ten_items())
    with pytest.raises(PromptFileError) as found:
        load(path)
    message = str(found.value)
    assert f"{path}:1: field 'choices'[0] is ' True'" in message
    assert f"{path}:1: field 'choices'[1] is ' False'" in message
    assert "20 field(s)" in message and "write 'True'" in message
    # written by the rule, the same file loads
    fixed = load(_write(tmp_path / "fixed.jsonl", ten_items(("True", "False"))))
    assert len(fixed) == 10 and fixed.records[0].choices == ("True", "False")


def test_a_template_ending_in_whitespace_is_refused(tmp_path):
    rows = ten_items(("True", "False"))
    rows[3]["template"] += " "
    with pytest.raises(PromptFileError, match=r"mine\.jsonl:4: field 'template' ends with"):
        load(_write(tmp_path / "mine.jsonl", rows))
    # a generation item's template may end as it likes: nothing is appended after it
    rows[3] = {"prompt_id": "g", "term": "skip link", "task": "generation",
               "template": "A skip link is ", "max_tokens": 3}  # fmt: skip
    assert len(load(_write(tmp_path / "gen.jsonl", rows))) == 10


@pytest.mark.parametrize("target", [7, ["the page"], "", "  "])
def test_a_target_that_is_not_a_non_empty_string_is_refused(tmp_path, target):
    row = {"prompt_id": "g", "term": "skip link", "task": "generation",
           "template": "A skip link", "max_tokens": 3, "target": target}  # fmt: skip
    with pytest.raises(PromptFileError, match=r"g\.jsonl:1: field 'target' is"):
        load(_write(tmp_path / "g.jsonl", [row]))


def test_pair_answers_and_targets_follow_the_same_rule(tmp_path):
    base = {"pair_id": "ioi", "clean": "When Mary and John went out, John gave it to",
            "corrupted": "When Mary and John went out, Mary gave it to"}  # fmt: skip
    spaced = _write(tmp_path / "p.jsonl", [{**base, "clean_answer": " Mary",
                                           "corrupted_answer": " John"}])  # fmt: skip
    with pytest.raises(PromptFileError, match=r"p\.jsonl:1: field 'clean_answer' is ' Mary'"):
        patching.load_pairs(spaced)
    target = _write(tmp_path / "t.jsonl", [{**base, "target": " Mary"}])
    with pytest.raises(PromptFileError, match=r"t\.jsonl:1: field 'target' is ' Mary'"):
        patching.load_pairs(target)
    ends = _write(tmp_path / "e.jsonl", [{**base, "clean": base["clean"] + " ", "target": "Mary"}])
    with pytest.raises(PromptFileError, match=r"e\.jsonl:1: field 'clean' ends with whitespace"):
        patching.load_pairs(ends)
    for bad in (3, ""):
        wrong = _write(tmp_path / "w.jsonl", [{**base, "target": bad}])
        with pytest.raises(PromptFileError, match=r"w\.jsonl:1: .*'target'"):
            patching.load_pairs(wrong)
    ok = _write(
        tmp_path / "ok.jsonl", [{**base, "clean_answer": "Mary", "corrupted_answer": "John"}]
    )
    pairs, _, _ = patching.load_pairs(ok)
    assert pairs[0].clean_answer == "Mary"
    builtin, _, _ = patching.load_pairs("pairs")  # the built-in set follows the rule
    assert all(not p.target[0].isspace() for p in builtin)


def test_every_file_kind_appends_a_continuation_the_same_way(byte_tokenizer, tmp_path):
    """A choice, a scan target, a pair's target and a pair's answer written "True" are the
    same tokens after the prompt: one convention, not one per file kind."""
    model = build_tiny("llama", byte_tokenizer)
    template = "True or False: a skip link helps.\nAnswer:"
    rows = [
        {"prompt_id": "r", "term": "skip link", "task": "recognition", "template": template,
         "choices": ["True", "False"], "answer_idx": 0},
        {"prompt_id": "g", "term": "skip link", "task": "generation", "template": template,
         "max_tokens": 2, "target": "True"},
    ]  # fmt: skip
    recognition, generation = load(_write(tmp_path / "k.jsonl", rows)).records
    prompt = model.tokenize(template)
    want = prompt + continuation_ids(model.tokenizer, "True")
    assert want[len(prompt) :] == model.tokenizer(" True", add_special_tokens=False)["input_ids"]
    choice = scan.scored(model, recognition)[0][0]
    target = scan.scored(model, generation)[0][0]
    pair = patching.Pair("p", "", template, template, target="True")
    assert list(choice.ids) == list(target.ids) == patching.prepare(model, pair).clean == want
    words = [  # one-token words after a space, written without it
        w[1:] for w in map(model.tokenizer.decode, ([i] for i in range(len(model.tokenizer))))
        if w[:1] == " " and len(continuation_ids(model.tokenizer, w[1:])) == 1
    ][:2]  # fmt: skip
    answer = patching.prepare(model, patching.Pair("a", "", template, template, None, *words))
    assert answer.metric.correct == continuation_ids(model.tokenizer, words[0])[0]
    assert answer.metric.wrong == model.tokenizer(" " + words[1])["input_ids"][-1]


def _example_lines(text: str) -> dict[str, dict]:
    """The example line of each file kind: ``jsonl`` blocks after a ``<!-- kind -->`` mark."""
    found = re.findall(r"<!-- example: (\w[\w ]*) -->\s*```jsonl\n(.*?)\n```", text, re.S)
    return {kind: json.loads(line) for kind, line in found}


@pytest.mark.parametrize("doc", ["README.md", "docs/records.md"])
def test_the_docs_give_a_complete_example_line_for_each_file_kind(doc, tmp_path):
    examples = _example_lines((ROOT / doc).read_text("utf-8"))
    kinds = {"recognition", "generation with a target", "pair with a target", "pair with answers"}
    assert set(examples) == kinds, doc
    for kind, row in examples.items():
        path = _write(tmp_path / f"{kind.replace(' ', '_')}.jsonl", [row])
        loader = patching.load_pairs if kind.startswith("pair") else load
        assert loader(path)  # complete: it loads as it stands
        # and the rule bites: a leading space on its continuation is refused
        field = next(f for f in ("choices", "target", "clean_answer") if f in row)
        row = {
            **row,
            field: [" " + c for c in row[field]] if field == "choices" else " " + row[field],
        }
        with pytest.raises(PromptFileError, match="doubled whitespace"):
            loader(_write(path, [row]))


# Issue 40, silent 11: every leading or trailing character that Unicode calls whitespace or
# format (Zs, Cf, or str.isspace) moves a score; the plain leading space was the only one
# refused. "True " moved SmolLM2's choice score from -2.83 to -3.62, "\u200bTrue" to -5.82.
STRAY = [
    ("True ", "ends with whitespace (U+0020 SPACE)"),
    ("True\t", "ends with whitespace (U+0009 (a control character))"),
    ("True\xa0", "ends with whitespace (U+00A0 NO-BREAK SPACE)"),
    ("\u200bTrue", "starts with an invisible format character (U+200B ZERO WIDTH SPACE)"),
    ("\ufeffTrue", "starts with an invisible format character (U+FEFF ZERO WIDTH NO-BREAK SPACE)"),
    ("True\u2060", "ends with an invisible format character (U+2060 WORD JOINER)"),
    ("\u3000True", "starts with whitespace (U+3000 IDEOGRAPHIC SPACE)"),
]


@pytest.mark.parametrize(("choice", "why"), STRAY, ids=[ascii(c) for c, _ in STRAY])
def test_whitespace_or_invisible_characters_at_either_end_of_a_choice_are_refused(
    tmp_path, choice, why
):
    path = _write(tmp_path / "mine.jsonl", ten_items((choice, "False")))
    with pytest.raises(PromptFileError) as found:
        load(path)
    message = str(found.value)
    assert f"{path}:1: field 'choices'[0] is {choice!r}, which {why}" in message
    assert "write 'True'" in message and "10 field(s)" in message


@pytest.mark.parametrize("end", ["\u200b", "\ufeff", "\u00a0"])
def test_a_prompt_ending_in_an_invisible_character_is_refused(tmp_path, end):
    rows = ten_items(("True", "False"))
    rows[3]["template"] += end
    with pytest.raises(PromptFileError, match=r"mine\.jsonl:4: field 'template' ends with .*U\+"):
        load(_write(tmp_path / "mine.jsonl", rows))


def test_pair_answers_and_prompts_follow_the_extended_rule(tmp_path):
    base = {"pair_id": "ioi", "clean": "When Mary and John went out, John gave it to",
            "corrupted": "When Mary and John went out, Mary gave it to"}  # fmt: skip
    for row, needle in [
        ({**base, "target": "Mary "}, "field 'target' is 'Mary ', which ends with whitespace"),
        ({**base, "clean_answer": "\u200bMary", "corrupted_answer": "John"},
         "field 'clean_answer' is '\\u200bMary', which starts with an invisible format"),
        ({**base, "corrupted": base["corrupted"] + "\ufeff", "target": "Mary"},
         "field 'corrupted' ends with an invisible format character (U+FEFF"),
    ]:  # fmt: skip
        path = _write(tmp_path / "p.jsonl", [row])
        with pytest.raises(PromptFileError) as found:
            patching.load_pairs(path)
        assert f"{path}:1: {needle}" in str(found.value)


def test_the_command_line_refuses_a_trailing_space_with_exit_2_before_the_model(
    tmp_path, monkeypatch, capsys
):
    from bindscope import cli

    loads: list = []
    monkeypatch.setattr(cli, "_load", lambda *a, **k: loads.append(a))
    path = _write(tmp_path / "mine.jsonl", ten_items(("True ", "False")))
    out = tmp_path / "out"
    argv = ["binding", "--prompts", str(path), "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: field 'choices'[0] is 'True ', which ends with whitespace" in err
    assert "Traceback" not in err and not loads and not list(out.rglob("*.json*"))
