"""Property-based: a records file cut short, with repeated or reordered lines, reads as
unique whole records or raises a RecordFileError; nothing else."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bindscope.errors import BindscopeWarning, RecordFileError
from bindscope.results.records import SCHEMA, RecordWriter, read_records


def _record(i: int, note: str) -> dict:
    return {"schema": SCHEMA, "experiment": "binding", "key": f"binding|m|main|t/p{i}|clean",
            "model": "m", "condition": "clean", "metrics": {"note": note},
            "provenance": {}}  # fmt: skip


@st.composite
def files(draw):
    notes = draw(st.lists(st.text(max_size=12), min_size=1, max_size=6))
    originals = [_record(i, n) for i, n in enumerate(notes)]
    lines = [json.dumps(r, ensure_ascii=draw(st.booleans())) for r in originals]
    order = draw(st.permutations(range(len(lines))))
    lines = [lines[i] for i in order]
    for _ in range(draw(st.integers(0, 3))):  # a second writer repeats some lines
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(lines)))
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    cut = draw(st.integers(0, len(data)) | st.just(len(data)))  # a crash mid-write
    return originals, data[:cut]


def _read(path: Path, **options) -> list[dict] | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BindscopeWarning)
        try:
            return list(read_records(path, **options))
        except RecordFileError:
            return None


@settings(max_examples=500, deadline=None)
@given(case=files(), tolerate_tail=st.booleans())
def test_records_read_whole_and_unique_or_refused(case, tolerate_tail):
    originals, data = case
    by_key = {r["key"]: r for r in originals}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "binding" / "records.jsonl"
        path.parent.mkdir()
        path.write_bytes(data)
        read = _read(path, tolerate_tail=tolerate_tail)
        if read is None:  # only a torn last line may be refused, and only without tolerance
            assert not tolerate_tail and data and not data.endswith(b"\n")
            return
        keys = [r["key"] for r in read]
        assert len(keys) == len(set(keys))
        for r in read:
            assert r == by_key[r["key"]]
        # a resume keeps exactly those records and leaves a clean file behind
        if tolerate_tail:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BindscopeWarning)
                RecordWriter(path).close()
            assert _read(path) == read
            assert _read(path, duplicates="error") == read


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_read_or_raise_a_record_file_error(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.jsonl"
        path.write_bytes(data)
        for tolerate_tail in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BindscopeWarning)
                try:
                    read = list(read_records(path, tolerate_tail=tolerate_tail))
                except RecordFileError:
                    continue
            assert len({r["key"] for r in read}) == len(read)
