"""Prompt and pair files are read alike (issue 40): lines end at "\\n" only, bytes that are not
UTF-8 and lines that are not JSON objects are refused with the file and line, and a term
has one spelling (Unicode NFC, nothing invisible at its ends) however a line writes it."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from bindscope.errors import PromptFileError
from bindscope.prompts import load
from bindscope.prompts.pairs import load_pairs

CLEAN = "When Mary and John went out, John gave the book to"
CORRUPTED = "When Mary and John went out, Mary gave the book to"


def pair(i: int, **fields) -> dict:
    return {"pair_id": f"p{i}", "term": "book", "clean": CLEAN, "corrupted": CORRUPTED,
            "target": "Mary", **fields}  # fmt: skip


def prompt(i: int, term: str = "skip link", template: str | None = None) -> dict:
    return {"prompt_id": f"g{i}", "term": term, "task": "generation",
            "template": template or f"A {term} is ({i})", "max_tokens": 3}  # fmt: skip


def _write(path: Path, lines: list[str | dict]) -> Path:
    text = "".join((json.dumps(x, ensure_ascii=False) if isinstance(x, dict) else x) + "\n"
                   for x in lines)  # fmt: skip
    path.write_bytes(text.encode("utf-8"))
    return path


# ------------------------------------------- pair files: what prompt files already did


@pytest.mark.parametrize("char", ["\u2028", "\u0085", "\u2029"])
def test_a_pair_line_holding_a_line_separator_loads(tmp_path, char):
    """JSON strings may hold these as they are; str.splitlines() cut the line at them."""
    clean = CLEAN.replace("went out,", f"went out,{char}")
    path = _write(tmp_path / "p.jsonl", [pair(0, clean=clean), pair(1)])
    pairs, _, _ = load_pairs(path)
    assert [p.clean for p in pairs] == [clean, CLEAN]
    prompts = _write(tmp_path / "g.jsonl", [prompt(0, template=f"A skip{char} link, a skip link")])
    assert load(prompts).records[0].template == f"A skip{char} link, a skip link"


@pytest.mark.parametrize("loader", [load_pairs, load], ids=["pairs", "prompts"])
def test_a_latin_1_byte_is_refused_with_file_line_and_offset(tmp_path, loader):
    good = pair(0) if loader is load_pairs else prompt(0)
    first = json.dumps(good).encode() + b"\n"
    path = tmp_path / "p.jsonl"
    second = json.dumps({**good, "note": "Ren\u00e9"}, ensure_ascii=False)
    path.write_bytes(first + second.encode("latin-1"))
    offset = len(first) + second.index("\u00e9")
    with pytest.raises(PromptFileError) as found:
        loader(path)
    assert str(found.value).startswith(
        f"{path}:2: not UTF-8 text (byte 0xe9 at offset {offset}); save the file as UTF-8"
    )


@pytest.mark.parametrize("loader", [load_pairs, load], ids=["pairs", "prompts"])
def test_a_repeated_key_names_the_line_it_repeats_and_an_empty_file_is_refused(tmp_path, loader):
    """Both files are read by one reader: the same rule, the same message."""
    good = pair(0) if loader is load_pairs else prompt(0)
    kind = "pair" if loader is load_pairs else "prompt"
    path = _write(tmp_path / "p.jsonl", [good, "", good])
    key = "book/p0" if loader is load_pairs else "skip link/g0"
    with pytest.raises(PromptFileError) as found:
        loader(path)
    assert str(found.value).startswith(f"{path}:3: {kind} {key!r} (term/id) repeats line 1")
    empty = _write(tmp_path / "empty.jsonl", [""])
    with pytest.raises(PromptFileError, match=rf"empty\.jsonl: no {kind}s \(the file holds no"):
        loader(empty)


@pytest.mark.parametrize(
    ("line", "kind"),
    [("5", "a number"), ("null", "null"), ('"p0"', "a string"), ("[1, 2]", "an array"),
     ("true", "a boolean (true/false)"), ("2.5", "a number")],
)  # fmt: skip
@pytest.mark.parametrize("loader", [load_pairs, load], ids=["pairs", "prompts"])
def test_a_line_that_is_not_a_json_object_is_refused_naming_the_line(tmp_path, loader, line, kind):
    good = pair(0) if loader is load_pairs else prompt(0)
    path = _write(tmp_path / "p.jsonl", [good, line])
    with pytest.raises(PromptFileError) as found:
        loader(path)
    assert str(found.value).startswith(
        f"{path}:2: got {kind} where a JSON object ({{...}}) is expected; write one record"
    )


def test_the_command_line_exits_2_on_a_bad_pair_file_before_the_model(
    tmp_path, monkeypatch, capsys
):
    from bindscope import cli

    loads: list = []
    monkeypatch.setattr(cli, "_load", lambda *a, **k: loads.append(a))
    for lines, needle in [(["null"], ":1: got null where"), (["\xe9"], ":1: not UTF-8 text")]:
        path = tmp_path / "bad.jsonl"
        path.write_bytes("\n".join(lines).encode("latin-1"))
        out = tmp_path / "out"
        assert cli.main(["patch", "--pairs", str(path), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"{path}{needle}" in err and "Traceback" not in err
        assert not loads and not list(out.rglob("*.json*"))


# ------------------------------------------------------------ one term, one spelling

NFC = unicodedata.normalize("NFC", "café menu")
NFD = unicodedata.normalize("NFD", "café menu")
SPELLINGS = [(NFD, "NFD"), (f" {NFC}", "leading space"), (f"{NFC}\u200b", "zero-width space")]


@pytest.mark.parametrize(("spelled", "how"), SPELLINGS, ids=[h for _, h in SPELLINGS])
def test_two_spellings_of_one_term_are_refused_naming_both_lines(tmp_path, spelled, how):
    assert spelled != NFC and unicodedata.normalize("NFC", spelled.strip("\u200b ")) == NFC
    rows = [prompt(0, NFC), prompt(1, "skip link"), prompt(2, spelled, f"A {NFC} is (2)")]
    path = _write(tmp_path / "p.jsonl", rows)
    with pytest.raises(PromptFileError) as found:
        load(path)
    message = str(found.value)
    assert message.startswith(f"{path}:3: field 'term' is {spelled!a} and {path}:1 ")
    assert f"as {NFC!a}" in message and "write it the same way on both lines" in message
    pairs = _write(tmp_path / "pairs.jsonl", [pair(0, term=spelled), pair(1, term=NFC)])
    with pytest.raises(PromptFileError, match=r"pairs\.jsonl:2: field 'term' is .*pairs\.jsonl:1"):
        load_pairs(pairs)


@pytest.mark.parametrize(("spelled", "how"), SPELLINGS, ids=[h for _, h in SPELLINGS])
def test_a_term_written_one_way_is_normalised_to_one_row(tmp_path, spelled, how):
    rows = [prompt(0, spelled, f"A {spelled} is (0)"), prompt(1, spelled, f"A {NFD} is (1)")]
    records = load(_write(tmp_path / "p.jsonl", rows)).records
    assert [r.term for r in records] == [NFC, NFC]
    assert [r.key for r in records] == [f"{NFC}/g0", f"{NFC}/g1"]
    pairs, _, _ = load_pairs(_write(tmp_path / "pairs.jsonl", [pair(0, term=spelled)]))
    assert pairs[0].term == NFC and pairs[0].key == f"{NFC}/p0"


def test_a_term_of_invisible_characters_only_is_refused(tmp_path):
    path = _write(tmp_path / "p.jsonl", [prompt(0, "skip link"), prompt(1, "\u200b\ufeff")])
    with pytest.raises(PromptFileError) as found:
        load(path)
    assert str(found.value).startswith(
        f"{path}:2: field 'term' is '\\u200b\\ufeff': only whitespace or invisible characters"
    )
