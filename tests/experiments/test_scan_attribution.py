"""``scan --method attribution``: estimates for every head, the top heads verified exactly.

The verified heads' effects are checked against an independent run of the exact scan of
every head on the same prompts (equal: both are the exact single-head ablation), and the
verified heads against the heads with the largest mean |estimate| in the records.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bindscope.cli import main
from bindscope.errors import InputError
from bindscope.experiments import scan
from bindscope.experiments.kit.attribution_method import ESTIMATE
from bindscope.experiments.kit.registry import validate_file
from bindscope.prompts import load
from bindscope.results.records import read_records
from tests.conftest import FAMILY_NAMES, build_tiny
from tests.experiments import planted, prompts_tiny

VERIFY = 4
RUN = {"n_resamples": 199, "progress": False}


def _entry(summary):
    return next(iter(summary["models"].values()))


def test_verified_heads_equal_the_exact_scan_and_are_the_top_estimates(
    tiny_llama, tiny_prompts, tmp_path
):
    model = tiny_llama
    kwargs = {"prompts": tiny_prompts, **RUN}
    found = _entry(
        scan.run(model, out=tmp_path / "a", method="attribution", verify=VERIFY, **kwargs)
    )
    exact = _entry(scan.run(model, out=tmp_path / "e", **kwargs))
    block, full = found["metrics"]["logprob"], exact["metrics"]["logprob"]
    estimate = np.array(block["estimate"], dtype=float)
    assert estimate.shape == (model.n_layers, model.n_heads) and np.isfinite(estimate).all()
    # the verified heads: the largest mean |estimate| (ties by head order)
    order = sorted(np.ndindex(*estimate.shape), key=lambda lh: (-abs(estimate[lh]), lh))
    verified = sorted(list(map(int, lh)) for lh in order[:VERIFY])
    assert sorted(block["verified"]) == verified and len(block["top"]) == VERIFY
    for metric, mine in found["metrics"].items():
        theirs = exact["metrics"][metric]
        for cell in mine["top"]:
            layer, head = cell["head"]
            # the same exact ablation of the same prompts (one runner): equal
            assert cell["value"] == theirs["effect"][layer][head]
            assert cell["low"] == theirs["low"][layer][head]
            # adjusted across all heads, unverified at p = 1: never below the full scan's
            assert cell["p_adjusted"] >= theirs["p_adjusted"][layer][head] - 1e-12
        effect = np.array(mine["effect"], dtype=float)
        assert np.isnan(effect).sum() == model.n_layers * model.n_heads - VERIFY
    agreement = block["agreement"]
    assert agreement["n_verified"] == VERIFY and 0 <= agreement["sign_agreement"] <= 1
    assert found["n_tests"] == model.n_layers * model.n_heads
    assert "estimate" not in full  # the exact scan's layout is unchanged


def test_records_schema_resume_and_settings(tiny_llama, tiny_prompts, tmp_path):
    out = tmp_path / "out"
    kwargs = {"prompts": tiny_prompts, "out": out, "method": "attribution", "verify": 3, **RUN}
    full = scan.run(tiny_llama, **kwargs)
    path = out / "scan" / "records.jsonl"
    n_items = len(scan.scannable(load(tiny_prompts)))
    # per prompt: one estimate, clean + 3 verified heads, one BSI record
    assert validate_file(path) == n_items * (1 + 1 + 3 + 1)
    estimates = [r for r in read_records(path) if r["experiment"] == ESTIMATE]
    assert len(estimates) == n_items
    lines = path.read_text().splitlines()
    keep = lines[: len(lines) // 3]  # cut inside the estimate phase
    path.write_text("\n".join(keep) + "\n" + lines[len(keep)][:40])
    resumed = scan.run(tiny_llama, **kwargs)
    assert json.dumps(resumed, sort_keys=True) == json.dumps(full, sort_keys=True)
    with pytest.raises(InputError, match="method"):  # the folder holds an attribution run
        scan.run(tiny_llama, prompts=tiny_prompts, out=out, **RUN)
    with pytest.raises(InputError, match="verify"):
        scan.run(tiny_llama, prompts=tiny_prompts, out=out, verify=3, **RUN)
    with pytest.raises(InputError, match="unit head"):
        scan.run(tiny_llama, prompts=tiny_prompts, out=out, method="attribution", unit="layer")


def test_planted_head_is_estimated_top_and_verified(byte_tokenizer, tmp_path):
    rows = [r for r in planted.prompt_rows() if r["task"] == "recognition"]
    pset = load(prompts_tiny.write(tmp_path, rows, name="all.jsonl"))
    model = planted.one_layer_model(byte_tokenizer)
    head = planted.top_head(model, pset.records)
    planted.plant(model, head, up=20.0, down=0.02)
    answered = planted.answered_by_model(model, list(pset.records))
    path = prompts_tiny.write(tmp_path, [r.to_dict() for r in answered], name="answered.jsonl")
    summary = scan.run(
        model, prompts=path, out=tmp_path / "out", method="attribution", verify=2, seed=3,
        n_resamples=999, progress=False,
    )  # fmt: skip
    m = _entry(summary)
    estimate = np.abs(np.array(m["metrics"]["logprob"]["estimate"], dtype=float))
    assert int(estimate[0].argmax()) == head
    assert m["metrics"]["accuracy"]["top"][0]["head"] == [0, head]
    assert m["metrics"]["accuracy"]["significant"] == [[0, head]]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_family_runs_the_attribution_scan(family, byte_tokenizer, sp_tokenizer, tmp_path):
    model = build_tiny(family, sp_tokenizer if family == "llama" else byte_tokenizer)
    prompts = prompts_tiny.write(tmp_path)
    for ablation in ("zero", "mean", "resample"):
        summary = scan.run(
            model, prompts=prompts, out=tmp_path / ablation, method="attribution", verify=2,
            ablation=ablation, limit=3, **RUN,
        )  # fmt: skip
        block = _entry(summary)["metrics"]["logprob"]
        assert np.isfinite(np.array(block["estimate"], dtype=float)).all(), ablation
        assert len(block["top"]) == 2 and all("estimate" in c for c in block["top"])


def test_cli_attribution_scan_and_report(tiny_llama, tiny_prompts, tmp_path, monkeypatch):
    import bindscope.cli as cli

    monkeypatch.setattr(cli, "_load", lambda *a, **k: tiny_llama)
    out = tmp_path / "out"
    argv = ["scan", "--prompts", str(tiny_prompts), "--out", str(out), "--no-progress"]
    argv += ["--method", "attribution", "--verify", "3", "--n-resamples", "199"]
    assert main(argv) == 0
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "estimate" in report.lower() and "Spearman" in report
    # bad combinations stop before the model loads and write nothing
    bad = tmp_path / "bad"
    assert main(["scan", "--out", str(bad), "--verify", "3"]) == 2
    assert main(["scan", "--out", str(bad), "--method", "attribution", "--unit", "layer"]) == 2
    assert not bad.exists()


# ------------------------------------------------ issue 27, items 2 and 3


def test_matched_classes_with_attribution_is_refused_before_the_model_loads(
    tiny_prompts, tmp_path, loads
):
    # unverified heads have no exact effect: the top set's mean would be NaN and p its floor
    out = tmp_path / "out"
    argv = ["scan", "--prompts", str(tiny_prompts), "--out", str(out), "--no-progress"]
    argv += ["--method", "attribution", "--verify", "3", "--matched-classes", "9"]
    assert main(argv) == 2
    assert loads == [] and not out.exists()
    with pytest.raises(InputError, match=r"--matched-classes.*--method exact"):
        scan.ScanOptions.of({"method": "attribution", "matched_classes": 9})


def test_bsi_vs_effect_of_the_attribution_scan_covers_every_head(
    tiny_llama, tiny_prompts, tmp_path
):
    from scipy.stats import spearmanr

    out = tmp_path / "out"
    summary = scan.run(
        tiny_llama, prompts=tiny_prompts, out=out, method="attribution", verify=3, **RUN
    )
    corr = _entry(summary)["bsi_vs_effect"]
    n_heads = tiny_llama.n_layers * tiny_llama.n_heads
    assert corr["effect"] == "attribution estimate" and corr["n_cells"] == n_heads > 3
    # independently: the mean BSI map against the mean estimate map, over every head
    records = list(read_records(out / "scan" / "records.jsonl"))
    bsi = {r["prompt_key"]: r["metrics"]["bsi"] for r in records
           if r["experiment"] == scan.BSI and r["metrics"]["eb_star"] is not None}  # fmt: skip
    est = {r["prompt_key"]: r["metrics"]["estimate"] for r in records
           if r["experiment"] == ESTIMATE and r["prompt_key"] in bsi}  # fmt: skip
    keys = sorted(est)
    x = np.mean([np.ravel(bsi[k]) for k in keys], 0)
    y = np.mean([np.ravel(est[k]) for k in keys], 0)
    assert corr["n_prompts"] == len(keys)
    # the same Spearman of the same float64 means (summed in another order): 1e-12
    assert abs(corr["value"] - spearmanr(x, y).statistic) < 1e-12
    # the exact scan's statistic covers its scanned heads and says so
    exact = _entry(scan.run(tiny_llama, prompts=tiny_prompts, out=tmp_path / "e", **RUN))
    assert exact["bsi_vs_effect"]["effect"] == "exact"
    assert exact["bsi_vs_effect"]["n_cells"] == n_heads
    lines = "\n".join(scan.DEFINITION.text(summary))
    assert "BSI vs attribution estimate effect" in lines and f"{n_heads} heads" in lines
