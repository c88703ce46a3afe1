"""``patch --method attribution --verify K``: every head estimated, the top heads patched exactly.

The verified heads' recoveries are checked against an independent exact patch of every head
on the same pairs (equal: both are the same exact patch), the verified heads against the
heads with the largest mean |estimate| in the records, and a planted head against the top.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bindscope.cli import main
from bindscope.errors import InputError
from bindscope.experiments import patching, scan
from bindscope.experiments.kit.attribution_method import DEFAULT_VERIFY, AttributionOptions
from bindscope.experiments.kit.registry import validate_file
from bindscope.interventions.ops import metric_values
from bindscope.results.records import read_records
from bindscope.runners.attribution_metrics import LogitDifference, metric_terms
from tests.conftest import FAMILY_NAMES, build_tiny
from tests.experiments import planted
from tests.experiments.test_patching import STEMS, SWAPS, _pairs, _write

RUN = {"n_resamples": 199, "progress": False}


def _entry(summary):
    return next(iter(summary["models"].values()))


def _target_pairs(model, n: int = 5) -> list[dict]:
    """Pairs of equal token length under ``model`` scored by a target's log-prob."""
    rows = []
    for i, stem in enumerate(STEMS):
        for j, (a, b) in enumerate(SWAPS):
            clean, corrupted = stem.format(x=a), stem.format(x=b)
            if len(model.tokenize(clean)) == len(model.tokenize(corrupted)):
                rows.append({"pair_id": f"p{i}_{j}", "term": a, "clean": clean,
                             "corrupted": corrupted, "target": "the page"})  # fmt: skip
            if len(rows) == n:
                return rows
    return rows


def _check_verified_equal_exact(model, pairs, tmp_path, verify):
    found = patching.run(
        model, pairs=pairs, out=tmp_path / "a", method="attribution", verify=verify, **RUN
    )
    exact = _entry(patching.run(model, pairs=pairs, out=tmp_path / "e", **RUN))
    m = _entry(found)
    estimate = np.array(m["estimate"], dtype=float)
    assert estimate.shape == (model.n_layers, model.n_heads) and np.isfinite(estimate).all()
    # the verified heads: the largest mean |estimate| in the records (ties by head order)
    records = list(read_records(tmp_path / "a" / "patching" / "records.jsonl"))
    raw = [r["metrics"]["estimate"] for r in records if r["experiment"] == patching.ESTIMATE]
    mean = np.mean(np.array(raw, dtype=float), 0)
    order = sorted(np.ndindex(*mean.shape), key=lambda lh: (-abs(mean[lh]), lh))
    assert sorted(m["verified"]) == sorted(list(map(int, lh)) for lh in order[:verify])
    assert len(m["top"]) == verify and m["n_tests"] == model.n_layers * model.n_heads
    listed = {tuple(c["head"]): c for c in exact["top"]}  # the exact patch's top ten
    for cell in m["top"]:
        layer, head = cell["head"]
        # the same exact patch of the same pairs (one code path): equal, not close
        assert cell["value"] == exact["recovery"][layer][head]
        theirs = listed.get((layer, head))
        if theirs is not None:  # the same bootstrap and permutation draws
            assert (cell["low"], cell["high"], cell["p"]) == (
                theirs["low"], theirs["high"], theirs["p"]
            )  # fmt: skip
            # adjusted across all heads, the unverified at p = 1: never below the full's
            assert cell["p_adjusted"] >= theirs["p_adjusted"] - 1e-12
        assert cell["estimate"] == pytest.approx(float(estimate[layer, head]))
    recovery = np.array(m["recovery"], dtype=float)
    assert np.isnan(recovery).sum() == model.n_layers * model.n_heads - verify
    assert m["agreement"]["n_verified"] == verify
    return found, exact


def test_verified_heads_equal_the_exact_patch_answer_pairs(tiny_llama, tmp_path):
    pairs = _write(tmp_path, _pairs(tiny_llama)[:5])  # logit difference of one-token answers
    found, exact = _check_verified_equal_exact(tiny_llama, pairs, tmp_path, verify=4)
    assert found["method"] == "attribution" and found["verify"] == 4
    assert exact["n_pairs"] == _entry(found)["n_pairs"]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_verified_heads_equal_the_exact_patch_on_every_family(
    family, byte_tokenizer, sp_tokenizer, tmp_path
):
    model = build_tiny(family, sp_tokenizer if family == "llama" else byte_tokenizer)
    rows = _target_pairs(model)
    assert len(rows) >= 3, "too few equal-length pairs under this tokenizer"
    _check_verified_equal_exact(model, _write(tmp_path, rows), tmp_path, verify=3)


def test_planted_head_is_estimated_top_and_verified(byte_tokenizer, tmp_path):
    model = planted.one_layer_model(byte_tokenizer)
    head = 5
    planted.plant(model, head, up=20.0, down=0.02)  # one head carries what differs
    pairs = _write(tmp_path, _pairs(model))
    options = {"method": "attribution", "verify": 2, "n_resamples": 999, "progress": False}
    m = _entry(patching.run(model, pairs=pairs, out=tmp_path / "out", **options))
    estimate = np.abs(np.array(m["estimate"], dtype=float))
    assert int(estimate[0].argmax()) == head
    assert m["top"][0]["head"] == [0, head]
    assert m["top"][0]["value"] == pytest.approx(1.0, abs=0.1)
    assert abs(m["top"][1]["value"]) < 0.1  # the other verified head recovers ~nothing
    assert [0, head] in m["significant"]


@pytest.mark.parametrize("kind", ["answers", "target"])
def test_the_records_metric_is_the_metric_attribution_differentiates(tiny_llama, tmp_path, kind):
    rows = _pairs(tiny_llama)[:3] if kind == "answers" else _target_pairs(tiny_llama, 3)
    found, _, _ = patching.load_pairs(_write(tmp_path, rows))
    for p in (patching.prepare(tiny_llama, pair) for pair in found):
        for logits in tiny_llama.logits([p.clean, p.corrupted]):
            n = logits.shape[0]
            if isinstance(p.metric, LogitDifference):
                ids = torch.zeros(1, n, dtype=torch.long)  # only the width is read
            else:
                ids = torch.tensor([list(p.clean)])
            terms, _ = metric_terms([p.metric], ids, every_logit=True)
            shared = float(metric_values(logits[None], terms)[0])
            if isinstance(p.metric, LogitDifference):  # one float32 subtraction in both
                assert p.measure(logits) == shared
            else:  # a float64 mean of float32 log-probs vs a float32 weighted sum of them
                logp = logits.float().log_softmax(-1)[-p.metric.n_target - 1 : -1].abs().max()
                eps = torch.finfo(torch.float32).eps
                bound = (p.metric.n_target + 1) * eps / 2 * float(logp)
                assert abs(p.measure(logits) - shared) <= bound


def test_records_resume_and_refusals(tiny_llama, tmp_path):
    pairs = _write(tmp_path, _pairs(tiny_llama)[:4])
    out = tmp_path / "out"
    kwargs = {"pairs": pairs, "out": out, "method": "attribution", "verify": 3, **RUN}
    full = patching.run(tiny_llama, **kwargs)
    path = out / "patching" / "records.jsonl"
    # per pair: one estimate, clean + 3 verified heads
    assert validate_file(path) == 4 * (1 + 1 + 3)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[: len(lines) // 3]) + "\n")  # cut inside the estimates
    resumed = patching.run(tiny_llama, **kwargs)
    assert json.dumps(resumed, sort_keys=True) == json.dumps(full, sort_keys=True)
    with pytest.raises(InputError, match="method"):  # the folder holds an attribution run
        patching.run(tiny_llama, pairs=pairs, out=out, **RUN)
    with pytest.raises(InputError, match="unit head"):
        patching.run(tiny_llama, pairs=pairs, out=out, method="attribution", unit="layer")
    with pytest.raises(InputError, match="--verify applies"):
        patching.run(tiny_llama, pairs=pairs, out=out, verify=3)


def test_cli_patch_by_attribution_on_a_pair_file(tiny_llama, tmp_path, loads, capsys):
    pairs = _write(tmp_path, _pairs(tiny_llama)[:4])
    out = tmp_path / "out"
    argv = ["patch", "--pairs", str(pairs), "--out", str(out), "--no-progress"]
    argv += ["--method", "attribution", "--verify", "3", "--n-resamples", "199"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "Activation patching" in text and "estimate vs exact on 3 verified heads" in text
    summary = json.loads((out / "patching" / "summary.json").read_text())
    exact_keys = set(
        _entry(patching.run(tiny_llama, pairs=pairs, out=tmp_path / "e", **RUN))
    )  # the exact layout, and the attribution additions
    assert exact_keys < set(_entry(summary))
    assert set(_entry(summary)) - exact_keys == {
        "estimate", "n_estimated_pairs", "verified", "agreement", "n_tests"
    }  # fmt: skip
    assert main(["report", str(out)]) == 0
    # bad combinations stop before the model loads and write nothing
    n = len(loads)
    bad = tmp_path / "bad"
    assert main(["patch", "--out", str(bad), "--verify", "3"]) == 2
    assert main(["patch", "--out", str(bad), "--method", "attribution", "--unit", "layer"]) == 2
    assert len(loads) == n and not bad.exists()


@pytest.mark.parametrize("options", [patching.PatchingOptions, scan.ScanOptions])
def test_the_method_options_and_their_check_are_said_once(options):
    """issue 42: ``--method``/``--verify`` and their check live in one options class."""
    assert issubclass(options, AttributionOptions)
    assert not {"method", "verify"} & set(options.__annotations__)
    with pytest.raises(InputError, match="--verify applies to --method attribution"):
        options(verify=3)
    assert options(method="attribution").method_settings() == {
        "method": "attribution",
        "verify": DEFAULT_VERIFY,
    }
