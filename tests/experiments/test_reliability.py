"""Issue 19 (reliability, third round): no option half-applied, no summary from the wrong
records, no number past what the model can see. One test (or more) per case of the issue."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from bindscope import cli
from bindscope.errors import InputError
from bindscope.experiments import patching, scan
from bindscope.prompts import load
from tests.experiments.test_cli_errors import _fails, _no_records
from tests.experiments.test_patching import _pairs
from tests.experiments.test_patching import _write as write_pairs


def _records(path):
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def _rewrite(path, records):
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), "utf-8")


# ------------------------------------------------------------- 1: --limit is positive


@pytest.mark.parametrize("command", ["scan", "patch"])
@pytest.mark.parametrize("value", ["-1", "0"])
def test_limit_below_one_is_refused_before_the_model(tmp_path, capsys, loads, command, value):
    _fails(
        [command, "--out", str(tmp_path), "--limit", value],
        capsys,
        f"argument --limit: {value} is not a positive integer",
    )
    assert not loads
    _no_records(tmp_path)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_limit_below_one_is_refused_in_the_api(tiny_llama, tiny_prompts, tmp_path, limit):
    with pytest.raises(InputError, match=r"limit=.* a positive integer"):
        scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, limit=limit, progress=False)
    pairs = write_pairs(tmp_path, _pairs(tiny_llama)[:2])
    with pytest.raises(InputError, match=r"limit=.* a positive integer"):
        patching.run(tiny_llama, pairs=pairs, out=tmp_path, limit=limit, progress=False)
    assert not any(tmp_path.glob("*/records.jsonl"))


# ------------------------------------------- 2: a summary from none of the records fails


def test_summary_of_another_experiments_records_is_refused(tiny_llama, tmp_path, capsys):
    pairs = write_pairs(tmp_path, _pairs(tiny_llama)[:3])
    out = tmp_path / "out"
    patching.run(tiny_llama, pairs=pairs, out=out, n_resamples=99, progress=False)
    (out / "scan").mkdir()
    shutil.copy(out / "patching" / "records.jsonl", out / "scan" / "records.jsonl")
    shutil.rmtree(out / "patching")
    err = _fails(["summarize", str(out)], capsys, "scan/records.jsonl", "patching")
    assert "none of its" in err
    assert not (out / "scan" / "summary.json").exists()
    with pytest.raises(InputError, match="patching"):
        scan.summarize(out / "scan")


# ------------------------------------- 3: a record that cannot enter a summary is counted


@pytest.fixture
def scanned(tiny_llama, tiny_prompts, tmp_path):
    out = tmp_path / "out"
    scan.run(tiny_llama, prompts=tiny_prompts, out=out, limit=4, n_resamples=99, progress=False)
    return out


@pytest.mark.parametrize("bad", [None, float("nan")])
def test_scan_record_with_a_null_metric_is_left_out_and_counted(scanned, bad):
    path = scanned / "scan" / "records.jsonl"
    records = _records(path)
    victim = next(r for r in records if r["experiment"] == "scan" and r["condition"] == "L1.H2")
    victim["metrics"]["logprob"] = bad
    _rewrite(path, records)
    summary = scan.summarize(scanned / "scan")
    (label,) = summary["models"]
    assert summary["models"][label]["metrics"]["logprob"]["n_prompts"] == 3  # 4 less 1
    assert summary["models"][label]["metrics"]["accuracy"]["n_prompts"] == 4  # untouched
    (limit,) = [x for x in summary["limits"] if x["kind"] == "excluded" and x.get("keys")]
    assert limit["keys"] == [victim["key"]] and "logprob" in limit["message"]


def test_patching_record_with_a_null_metric_is_left_out_and_counted(tiny_llama, tmp_path):
    pairs = write_pairs(tmp_path, _pairs(tiny_llama)[:4])
    out = tmp_path / "out"
    patching.run(tiny_llama, pairs=pairs, out=out, n_resamples=99, progress=False)
    path = out / "patching" / "records.jsonl"
    records = _records(path)
    victim = next(r for r in records if r["condition"] == "L0.H1")
    victim["metrics"]["patched"] = None
    _rewrite(path, records)
    summary = patching.summarize(out / "patching")
    (entry,) = summary["models"].values()
    assert entry["n_pairs"] + entry["n_pairs_no_gap"] == 3  # 4 pairs less the bad one
    (limit,) = [x for x in summary["limits"] if x["kind"] == "excluded" and x.get("keys")]
    assert limit["keys"] == [victim["key"]]


def test_report_and_figures_say_when_the_summary_is_older_than_its_records(
    scanned, capsys, tmp_path
):
    path = scanned / "scan" / "records.jsonl"
    summary = scanned / "scan" / "summary.json"
    later = summary.stat().st_mtime + 10
    os.utime(path, (later, later))  # records changed after the summary was written
    assert cli.main(["figures", str(scanned), "--out", str(tmp_path / "figs")]) == 0
    said = capsys.readouterr().out
    assert "older than its records" in said and "bindscope summarize" in said
    assert cli.main(["report", str(scanned)]) == 0
    assert "older than its records" in (scanned / "report.md").read_text("utf-8")


# --------------------------------------- 5: an option that does not apply is refused


@pytest.mark.parametrize("extra", [[], ["--unit", "layer"]])
def test_scan_k_without_matched_classes_is_refused(tmp_path, capsys, loads, extra):
    _fails(
        ["scan", "--out", str(tmp_path), "--k", "7", *extra],
        capsys,
        "--k applies only with --matched-classes",
    )
    assert not loads
    _no_records(tmp_path)


def test_scan_k_is_recorded_only_where_it_applies(tiny_llama, tiny_prompts, tmp_path):
    with pytest.raises(InputError, match="k=3 applies only with matched_classes"):
        scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, k=3, progress=False)
    scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, limit=2, n_resamples=99,
             progress=False)  # fmt: skip
    first = _records(tmp_path / "scan" / "records.jsonl")[0]
    assert "k" not in first["scan"]


# ------------------------------------- 6: prompts the scan cannot score are counted


def test_scan_counts_generation_items_without_a_target(tiny_llama, tiny_prompts, tmp_path):
    pset = load(tiny_prompts)
    unscored = sum(r.task != "recognition" and not r.extra.get("target") for r in pset.records)
    assert unscored > 0
    summary = scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, n_resamples=99,
                       progress=False)  # fmt: skip
    (limit,) = [x for x in summary["limits"] if x["kind"] == "excluded"]
    assert limit["n"] == unscored
    assert "generation item without a 'target'" in limit["message"]
