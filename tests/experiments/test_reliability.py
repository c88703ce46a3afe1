"""Issue 19 (reliability, third round): no option half-applied, no summary from the wrong
records, no number past what the model can see. One test (or more) per case of the issue."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bindscope import cli
from bindscope.errors import InputError
from bindscope.experiments import patching, scan
from bindscope.experiments.kit.chunks import spread_over_terms
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
    with pytest.raises(InputError, match=r"limit=.* is not a whole number >= 1"):
        scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, limit=limit, progress=False)
    pairs = write_pairs(tmp_path, _pairs(tiny_llama)[:2])
    with pytest.raises(InputError, match=r"limit=.* is not a whole number >= 1"):
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


# ------------------------------------ 13: resamples the summary could never allocate


def test_n_resamples_past_memory_is_refused_before_the_work(
    tiny_llama, tiny_prompts, tmp_path, capsys, loads
):
    huge = 10**12
    with pytest.raises(InputError, match=r"n_resamples=1000000000000 .* GiB"):
        scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, n_resamples=huge,
                 progress=False)  # fmt: skip
    pairs = write_pairs(tmp_path, _pairs(tiny_llama)[:2])
    with pytest.raises(InputError, match=r"n_resamples=1000000000000 .* GiB"):
        patching.run(tiny_llama, pairs=pairs, out=tmp_path, n_resamples=huge, progress=False)
    assert not any(tmp_path.glob("*/records.jsonl"))
    for argv in (["scan", "--prompts", str(tiny_prompts)], ["patch", "--pairs", str(pairs)]):
        _fails([*argv, "--out", str(tmp_path / "o"), "--n-resamples", str(huge)], capsys,
               "--n-resamples 1000000000000")  # fmt: skip
    assert not loads and not (tmp_path / "o").exists()


# ----------------------- 14: heads and patch options and files checked before the model


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--repeat-length", "0"], "argument --repeat-length: 0 is not a positive integer"),
        (["--n-repeated", "0"], "argument --n-repeated: 0 is not a positive integer"),
        (["--top-k", "0"], "argument --top-k: 0 is not a positive integer"),
        (["--threshold", "bogus=0.5"], "--threshold bogus=0.5: no head class 'bogus'"),
    ],
)
def test_heads_options_are_checked_before_the_model_and_the_folder(
    tmp_path, capsys, loads, tiny_prompts, argv, needle
):
    out = tmp_path / "out"
    _fails(["heads", "--prompts", str(tiny_prompts), "--out", str(out), *argv], capsys, needle)
    assert not loads and not out.exists()


def test_heads_top_k_above_the_head_count_is_refused(tiny_llama, tiny_prompts, tmp_path):
    from bindscope.experiments import heads

    with pytest.raises(InputError, match=r"top_k=13: .* has 12 heads"):
        heads.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, top_k=13, progress=False)
    with pytest.raises(InputError, match="repeat_length=0"):
        heads.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, repeat_length=0,
                  progress=False)  # fmt: skip
    with pytest.raises(InputError, match="no head class"):
        heads.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, thresholds={"bogus": 0.5},
                  progress=False)  # fmt: skip
    assert not (tmp_path / "heads").exists()  # no settings file, no lock left behind


def test_empty_pair_file_is_refused_before_the_model(tmp_path, capsys, loads):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    _fails(["patch", "--pairs", str(empty), "--out", str(tmp_path / "o")], capsys,
           f"{empty}: no pairs")  # fmt: skip
    assert not loads and not (tmp_path / "o").exists()


# ------------------------------------------ 15: target and answers are ambiguous


def test_pair_with_target_and_answers_is_refused(tmp_path):
    from bindscope.errors import PromptFileError

    row = {"pair_id": "p", "term": "t", "clean": "a b", "corrupted": "a c", "target": "d",
           "clean_answer": "x", "corrupted_answer": "y"}  # fmt: skip
    path = write_pairs(tmp_path, [row])
    with pytest.raises(PromptFileError, match=r"pairs\.jsonl:1: .*both 'target' and"):
        patching.load_pairs(path)


# --------------------------------------------- 16: report and summarize agree


@pytest.mark.parametrize("command", ["report", "figures", "summarize"])
def test_a_folder_without_results_is_refused_alike(tmp_path, capsys, command):
    assert cli.main([command, str(tmp_path)]) == 2
    assert "no experiment results here" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "figures").exists()


# ------------------------------ 18: pair files checked first; term optional in pairs


def test_pairs_without_a_term_load_and_run(tiny_llama, tmp_path):
    rows = [{k: v for k, v in row.items() if k != "term"} for row in _pairs(tiny_llama)[:3]]
    pairs, _, _ = patching.load_pairs(write_pairs(tmp_path, rows))
    assert [p.key for p in pairs] == [r["pair_id"] for r in rows]
    summary = patching.run(tiny_llama, pairs=write_pairs(tmp_path, rows), out=tmp_path,
                           n_resamples=99, progress=False)  # fmt: skip
    assert summary["models"]


def test_bad_pair_file_stops_before_the_model(tmp_path, capsys, loads):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"pair_id": "x", "clean": "a"}\n')
    _fails(["patch", "--pairs", str(path), "--out", str(tmp_path / "o")], capsys,
           f"{path}:1: missing field(s) ['corrupted']")  # fmt: skip
    assert not loads


# ------------------------------------------ 22: --remote local; no lock left behind


@pytest.mark.parametrize(
    ("flag", "remote"), [([], False), (["--remote"], True), (["--remote", "local"], "local")]
)
def test_remote_local_reaches_load_model(monkeypatch, tmp_path, tiny_llama, flag, remote):
    import bindscope

    seen = {}

    def load_model(name, **kwargs):
        seen.update(kwargs)
        return tiny_llama

    monkeypatch.setattr(bindscope, "load_model", load_model)
    args = cli.parser().parse_args(["binding", "--out", str(tmp_path), *flag])
    cli._load(args.model, args.revision, args)
    assert seen["remote"] == remote


def test_a_failed_load_leaves_no_lock_or_folder(monkeypatch, tmp_path, capsys, tiny_prompts):
    from bindscope.errors import ModelLoadError

    def fail(*args, **kwargs):
        raise ModelLoadError("no NDIF API key is configured")

    monkeypatch.setattr(cli, "_load", fail)
    out = tmp_path / "out"
    for command in ("binding", "c5", "fewshot"):
        argv = [command, "--prompts", str(tiny_prompts), "--out", str(out), "--remote"]
        _fails(argv, capsys, "no NDIF API key")
        assert not out.exists(), list(out.rglob("*"))


# ------------------------------- 17: progress moves per pass; --limit spread over terms


def test_scan_spread_takes_prompts_from_every_term(tiny_llama, tiny_prompts, tmp_path, capsys):
    terms = {r.term for r in scan.scannable(load(tiny_prompts))}
    assert len(terms) == 4
    first = spread_over_terms(scan.scannable(load(tiny_prompts)), None)[:4]
    assert {r.term for r in first} == terms  # one prompt of each term
    assert {r.term for r in scan.scannable(load(tiny_prompts))[:4]} != terms  # file order
    with pytest.raises(InputError, match="add limit=N"):
        scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, spread=True, progress=False)
    scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, limit=4, spread=True,
             n_resamples=99, progress=False)  # fmt: skip
    records = _records(tmp_path / "scan" / "records.jsonl")
    assert {r["term"] for r in records} == terms
    assert all(r["scan"]["spread"] is True for r in records if r["experiment"] == "scan")
    assert cli.main(["scan", "--spread", "--out", str(tmp_path / "o")]) == 2
    assert "--spread applies only with --limit" in capsys.readouterr().err


def test_scan_progress_moves_after_every_pass(tiny_llama, tiny_prompts, tmp_path, monkeypatch):
    """The bar counts (prompt, condition) rows and moves after each pass, not per chunk."""
    from bindscope.runners import scan as scan_runner

    updates: list[tuple[str, int]] = []
    real = scan_runner.tqdm

    class Spy(real):
        def update(self, n=1):
            updates.append((self.desc, n))
            return super().update(n)

    monkeypatch.setattr(scan_runner, "tqdm", Spy)
    scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, limit=2, batch_size=2,
             n_resamples=99, progress=True)  # fmt: skip
    rows = [n for desc, n in updates if "rows" in desc]
    n_conditions = tiny_llama.n_layers * tiny_llama.n_heads
    n_sequences = sum(len(r.choices) for r in scan.scannable(load(tiny_prompts))[:2])
    assert sum(rows) == n_sequences * n_conditions  # one row per choice sequence and condition
    assert len(rows) > 2  # many steps within one chunk (a chunk is all that runs here)


# ---------------------------------------------------- 23: help text for every option


def test_every_option_says_what_it_does_and_its_default():
    import argparse

    top = cli.parser()
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for command, sub in action.choices.items():
        for option in sub._actions:
            if isinstance(option, argparse._HelpAction):
                continue
            name = f"{command} {(option.option_strings or [option.dest])[-1]}"
            text = option.help or ""
            if not text:
                missing.append(f"{name}: no help")
            elif (
                option.default is not None
                and option.default is not False
                and not option.required
                and "default" not in text
            ):
                missing.append(f"{name}: help does not give the default {option.default}")
    assert not missing, "\n".join(missing)


# ------------------------------------------- 19: where an experiment's figures come from


def test_heads_says_where_its_figures_come_from_and_figures_draws_them(
    tiny_llama, tiny_prompts, tmp_path, capsys, loads
):
    out = tmp_path / "out"
    argv = ["heads", "--prompts", str(tiny_prompts), "--out", str(out), "--n-repeated", "2",
            "--repeat-length", "4", "--no-progress"]  # fmt: skip
    assert cli.main(argv) == 0
    said = capsys.readouterr().out
    assert f"figures: `bindscope figures {out}` draws them" in said
    assert cli.main(["figures", str(out)]) == 0
    assert list((out / "figures").glob("heads_*.png"))  # the maps per score
    readme = (Path(__file__).parents[2] / "README.md").read_text("utf-8")
    assert "and a map per score;" not in readme  # the README no longer says heads draws them
    assert "`bindscope figures DIR` then draws a map per score" in readme


# ------------------------------------------- 21: what capture_mode says and what runs


def test_local_sdpa_model_captures_eagerly_as_the_docs_say(sp_tokenizer, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    import bindscope
    from bindscope.interventions import ops
    from tests.conftest import tiny_config

    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(tiny_config("llama"), attn_implementation="sdpa")
    model = bindscope.load_model(hf.eval(), tokenizer=sp_tokenizer)
    assert model.capture_mode == "recompute"  # outside eager(): sdpa returns no weights
    with model.eager():
        assert model.capture_mode == "eager"
    assert model.capture_method == "eager"

    def never(*args, **kwargs):
        raise AssertionError("a local capture recomputed its probabilities")

    monkeypatch.setattr(ops, "recompute_probs", never)
    assert model.attention_probs(["Alt text describes an image."])[0].shape[0] == 3
    docs = (Path(__file__).parents[2] / "docs" / "remote.md").read_text("utf-8")
    assert "says `recompute` outside `model.eager()`" in docs
    assert "local captures read the module's weights and never\nrecompute" in docs
