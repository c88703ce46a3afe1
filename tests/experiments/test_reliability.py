"""Issue 19 (reliability, third round): no option half-applied, no summary from the wrong
records, no number past what the model can see. One test (or more) per case of the issue."""

from __future__ import annotations

import json
import shutil

import pytest

from bindscope.errors import InputError
from bindscope.experiments import patching, scan
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
