"""One writer per results folder; readers de-duplicate or refuse repeated keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bindscope import cli
from bindscope.errors import BindscopeWarning, RecordFileError, ResultsLockedError
from bindscope.experiments.kit.registry import validate_file
from bindscope.results.lock import FolderLock
from bindscope.results.records import SCHEMA, RecordWriter, read_records

ROOT = Path(__file__).resolve().parents[2]


def _record(key: str) -> dict:
    return {"experiment": "binding", "key": key, "model": "m", "condition": "clean",
            "metrics": {}, "provenance": {}}  # fmt: skip


def test_second_writer_in_the_same_process_is_refused(tmp_path):
    with RecordWriter(tmp_path / "binding" / "records.jsonl") as writer:
        writer.write(_record("a"))
        with pytest.raises(ResultsLockedError) as err:
            RecordWriter(tmp_path / "binding" / "records.jsonl")
    message = str(err.value)
    assert str(tmp_path / "binding") in message and f"pid {os.getpid()}" in message
    assert "pass another --out" in message
    with RecordWriter(tmp_path / "binding" / "records.jsonl") as writer:  # released
        assert "a" in writer


CHILD = textwrap.dedent(
    """
    import sys
    from bindscope.results.records import RecordWriter
    with RecordWriter(sys.argv[1]) as writer:
        for i in range(3):
            writer.write({"experiment": "binding", "key": f"child|{i}", "model": "m",
                          "condition": "clean", "metrics": {}, "provenance": {}, "revision": None})
        print("locked", flush=True)
        sys.stdin.readline()
        for i in range(3, 6):
            writer.write({"experiment": "binding", "key": f"child|{i}", "model": "m",
                          "condition": "clean", "metrics": {}, "provenance": {}, "revision": None})
    """
)


def test_two_processes_one_folder(tmp_path, tiny_llama, tiny_prompts, monkeypatch, capsys):
    """A second `bindscope binding` stops with the lock message; the records stay unique."""
    out = tmp_path / "out"
    records = out / "binding" / "records.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(records)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        monkeypatch.setattr(cli, "_load", lambda *a, **k: tiny_llama)
        argv = ["binding", "--prompts", str(tiny_prompts), "--out", str(out), "--no-progress"]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert f"{out / 'binding'} is being written by another bindscope run" in err
        assert f"pid {child.pid}" in err
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
    finally:
        child.kill()
    keys = [r["key"] for r in read_records(records)]
    assert keys == [f"child|{i}" for i in range(6)]  # whole: nothing from the refused run
    # the lock is gone with its process: what stops a rerun now is only that the child's
    # records carry no settings.json, so they cannot be resumed; --force replaces them
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "settings.json" in err and "being written" not in err
    assert cli.main([*argv, "--force"]) == 0
    keys = [r["key"] for r in read_records(records)]
    assert len(keys) == len(set(keys)) == 20


def test_lock_is_a_context_manager_and_names_the_holder(tmp_path):
    with FolderLock(tmp_path):
        info = json.loads((tmp_path / ".bindscope.lock.json").read_text())
        assert info["pid"] == os.getpid() and info["host"]
        with pytest.raises(ResultsLockedError, match="is being written by another"):
            FolderLock(tmp_path).acquire()
    assert not (tmp_path / ".bindscope.lock.json").exists()


def _write_lines(path: Path, keys: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"schema": SCHEMA, **_record(k)}) + "\n" for k in keys), "utf-8"
    )


def test_readers_drop_repeated_keys_with_a_count(tmp_path):
    path = tmp_path / "binding" / "records.jsonl"
    _write_lines(path, ["a", "b", "a", "c", "b"])
    with pytest.warns(BindscopeWarning, match="2 record"):
        keys = [r["key"] for r in read_records(path)]
    assert keys == ["a", "b", "c"]
    with pytest.raises(RecordFileError, match=r"records.jsonl:3: key 'a' repeats line 1"):
        list(read_records(path, duplicates="error"))


def test_schema_validator_and_summarize_on_repeated_keys(
    tmp_path, tiny_llama, tiny_prompts, capsys
):
    from bindscope.experiments import binding as binding_experiment

    binding_experiment.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False)
    path = tmp_path / "binding" / "records.jsonl"
    lines = path.read_text("utf-8").splitlines(keepends=True)
    assert validate_file(path) == len(lines)
    path.write_text("".join(lines + lines[:3]), "utf-8")  # a second run appended three
    with pytest.raises(RecordFileError, match=rf"records.jsonl:{len(lines) + 1}: .*repeats line 1"):
        validate_file(path)
    assert cli.main(["summarize", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "3 record(s) repeat the key of an earlier line" in err
    summary = json.loads((tmp_path / "binding" / "summary.json").read_text())
    assert sum(m["n"] + m["n_skipped"] for m in summary["models"].values()) == len(lines)


def test_resume_repairs_a_file_with_repeated_keys(tmp_path):
    path = tmp_path / "binding" / "records.jsonl"
    _write_lines(path, ["a", "a", "b"])
    with pytest.warns(BindscopeWarning, match="1 record"), RecordWriter(path):
        pass
    assert [r["key"] for r in read_records(path)] == ["a", "b"]
