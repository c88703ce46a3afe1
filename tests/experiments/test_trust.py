"""What a run refuses, and says, before it can give wrong numbers (issues 27 and 28).

Versions and a damaged ``settings.json`` (27.7, 27.14), a too-long prompt's label (27.8),
the scan's too-long refusal and empty summaries (27.17), the audit file and the resume
check before the model loads (28.5), the whitespace trap through ``audit`` (28.1).
"""

from __future__ import annotations

import json

import pytest

from bindscope import cli
from bindscope.errors import InputError, ModelLoadError
from bindscope.experiments import binding, patching, scan
from bindscope.results.settings import versions
from tests.experiments import prompts_tiny
from tests.experiments.test_patching import _pairs, _write
from tests.prompts.test_whitespace import ten_items

FILLER = "the page " * 150  # past the tiny models' 256-token window


def _binding_argv(prompts, out, *extra):
    return ["binding", "--prompts", str(prompts), "--out", str(out), "--no-progress", *extra]


# ------------------------------------------------------------- 27.7: versions are settings


def test_settings_store_the_versions_and_a_resume_under_others_is_refused(
    tiny_llama, tiny_prompts, tmp_path, loads, capsys
):
    out = tmp_path / "out"
    assert cli.main(_binding_argv(tiny_prompts, out)) == 0
    path = out / "binding" / "settings.json"
    stored = json.loads(path.read_text())
    assert stored["versions"] == versions()
    import nnsight
    import torch
    import transformers

    assert stored["versions"]["transformers"] == transformers.__version__
    assert stored["versions"]["torch"] == torch.__version__
    assert stored["versions"]["nnsight"] == nnsight.__version__
    stored["versions"]["transformers"] = "4.0.0"  # records written under another version
    path.write_text(json.dumps(stored))
    n = len(loads)
    capsys.readouterr()
    assert cli.main(_binding_argv(tiny_prompts, out)) == 2
    err = capsys.readouterr().err
    assert "transformers version: '4.0.0' then" in err and "--force" in err
    assert len(loads) == n  # refused before the model loads
    with pytest.raises(InputError, match="transformers version"):  # and in Python
        binding.run(tiny_llama, prompts=tiny_prompts, out=out, progress=False)
    assert cli.main(_binding_argv(tiny_prompts, out, "--force")) == 0
    assert json.loads(path.read_text())["versions"] == versions()


def test_a_folder_from_before_versions_were_stored_is_refused(tiny_llama, tiny_prompts, tmp_path):
    out = tmp_path / "out"
    binding.run(tiny_llama, prompts=tiny_prompts, out=out, progress=False)
    path = out / "binding" / "settings.json"
    stored = json.loads(path.read_text())
    del stored["versions"]
    path.write_text(json.dumps(stored))
    with pytest.raises(InputError, match="bindscope version: 'not recorded' then"):
        binding.run(tiny_llama, prompts=tiny_prompts, out=out, progress=False)


# ------------------------------------------- 27.14 and 28.5: refused before the model loads


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"settings": 3, "models": {}}'])
def test_a_damaged_settings_file_is_refused_before_the_model_loads(
    tiny_prompts, tmp_path, loads, capsys, damage
):
    out = tmp_path / "out"
    assert cli.main(_binding_argv(tiny_prompts, out)) == 0
    path = out / "binding" / "settings.json"
    path.write_text(damage)
    n = len(loads)
    capsys.readouterr()
    assert cli.main(_binding_argv(tiny_prompts, out)) == 2
    err = capsys.readouterr().err
    assert f"{path} is damaged" in err and "--force" in err and "Traceback" not in err
    assert len(loads) == n
    assert cli.main(_binding_argv(tiny_prompts, out, "--force")) == 0


def test_a_rerun_with_changed_settings_is_refused_before_the_model_loads(
    tiny_llama, tiny_prompts, tmp_path, loads, capsys
):
    out = tmp_path / "out"
    argv = ["scan", "--prompts", str(tiny_prompts), "--out", str(out), "--no-progress"]
    argv += ["--limit", "2", "--n-resamples", "99"]
    assert cli.main(argv) == 0
    n = len(loads)
    capsys.readouterr()
    assert cli.main([*argv, "--ablation", "mean"]) == 2
    assert "ablation: 'zero' then, 'mean' now" in capsys.readouterr().err
    assert len(loads) == n
    pairs = _write(tmp_path, _pairs(tiny_llama)[:2])  # patching: its plan runs without a model
    patch = ["patch", "--pairs", str(pairs), "--out", str(out), "--no-progress"]
    assert cli.main([*patch, "--n-resamples", "99", "--unit", "layer"]) == 0
    n = len(loads)
    assert cli.main([*patch, "--n-resamples", "99", "--unit", "head"]) == 2
    assert "unit: 'layer' then, 'head' now" in capsys.readouterr().err
    assert len(loads) == n


def test_a_non_string_target_is_refused_before_the_model_loads(tmp_path, loads, capsys):
    row = {"prompt_id": "g", "term": "skip link", "task": "generation",
           "template": "A skip link is", "max_tokens": 3, "target": 7}  # fmt: skip
    path = prompts_tiny.write(tmp_path, [row], name="t.jsonl")
    out = tmp_path / "out"
    assert cli.main(["scan", "--prompts", str(path), "--out", str(out)]) == 2
    assert "t.jsonl:1: field 'target' is 7" in capsys.readouterr().err
    assert loads == [] and not out.exists()


# ------------------------------------------------------------ 27.8: too long, not not_found


def test_an_over_long_prompt_in_binding_is_labelled_too_long(tiny_llama, tmp_path):
    rows = prompts_tiny.records()[:3]
    rows[1] = {**rows[1], "template": FILLER + rows[1]["template"]}  # the term is still there
    path = prompts_tiny.write(tmp_path, rows, name="long.jsonl")
    summary = binding.run(tiny_llama, prompts=path, out=tmp_path / "out", progress=False)
    records = [json.loads(x) for x in (tmp_path / "out/binding/records.jsonl").open()]
    long = next(r for r in records if r["prompt_id"] == rows[1]["prompt_id"])
    assert "too_long" in long["metrics"]["flags"] and "not_found" not in long["metrics"]["flags"]
    assert long["metrics"]["span"]  # found: the window is the reason
    assert "context window" in long["metrics"]["skipped"]
    entry = next(iter(summary["models"].values()))
    assert entry["skipped_reasons"] == {"too_long": 1}
    (limit,) = [f for f in summary["limits"] if f["kind"] == "excluded"]
    assert "1 too_long" in limit["message"] and "context window" in limit["message"]
    assert "term was found" in limit["message"]


# ---------------------------------------------------------------------- 27.17, non-cache


def test_an_empty_summary_never_prints_none_p():
    for summarize, text in (
        (scan.summarize_scan, scan.text),
        (patching.summarize_patching, patching.text),
    ):
        lines = text(summarize([]))
        assert lines and not any("None" in line for line in lines), lines


def test_the_scan_refuses_a_too_long_prompt_by_id_and_writes_nothing(
    tiny_llama, tmp_path, loads, capsys
):
    rows = prompts_tiny.records()[:3]
    rows[0] = {**rows[0], "template": FILLER + rows[0]["template"]}
    path = prompts_tiny.write(tmp_path, rows, name="long.jsonl")
    out = tmp_path / "out"
    assert cli.main(["scan", "--prompts", str(path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "prompt screen reader/rec_001 (" in err and "long.jsonl:1" in err
    assert "text #" not in err and "audit" in err
    assert not (out / "scan" / "settings.json").exists()
    with pytest.raises(InputError, match="screen reader/rec_001"):
        scan.run(tiny_llama, prompts=path, out=out, progress=False)
    assert not (out / "scan" / "settings.json").exists()


def test_a_refused_demo_leaves_no_empty_out_folder(tmp_path, monkeypatch, capsys):
    from bindscope import loading

    def refuse(*args, **kwargs):
        raise ModelLoadError("no such model (a stand-in for any refusal)")

    monkeypatch.setattr(loading, "load_model", refuse)
    monkeypatch.setattr(loading, "check_embedded", lambda *a, **k: None)
    out = tmp_path / "new" / "demo"
    assert cli.main(["demo", "--out", str(out), "--model", "x/y", "--no-progress"]) == 2
    assert "no such model" in capsys.readouterr().err
    assert not out.exists() and not out.parent.exists()
    kept = tmp_path / "kept"
    (kept / "mine.txt").parent.mkdir()
    (kept / "mine.txt").write_text("a user's file")
    assert cli.main(["demo", "--out", str(kept), "--model", "x/y", "--no-progress"]) == 2
    assert (kept / "mine.txt").is_file()  # a folder that was there stays


# ------------------------------------------------------------------ 28.5: audit's own file


def test_audit_writes_a_file_only_where_write_says(tiny_prompts, tmp_path, loads, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert cli.main(["audit", "--prompts", str(tiny_prompts)]) == 0
    assert list(work.iterdir()) == []  # nothing into the working folder unasked
    target = tmp_path / "audits" / "tiny.jsonl"
    assert cli.main(["audit", "--prompts", str(tiny_prompts), "--write", str(target)]) == 0
    rows = [json.loads(x) for x in target.open()]
    assert len(rows) == len(prompts_tiny.records()) and list(work.iterdir()) == []


def test_audit_names_the_line_and_field_of_a_doubled_space(tmp_path, loads, capsys):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ten_items()))
    assert cli.main(["audit", "--prompts", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: field 'choices'[0] is ' True'" in err and "20 field(s)" in err
    assert loads == []  # refused before the model loads


def test_a_refused_audit_leaves_no_folder_for_its_file(tiny_prompts, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise ModelLoadError("no such model (a stand-in for any refusal)")

    monkeypatch.setattr(cli, "_load", refuse)
    target = tmp_path / "new" / "audit.jsonl"
    assert cli.main(["audit", "--prompts", str(tiny_prompts), "--write", str(target)]) == 2
    assert not target.parent.exists()
    assert cli.main(["audit", "--prompts", str(tiny_prompts), "--write", str(tmp_path)]) == 2
