"""Head scan end to end on tiny models: planted head found, null shows none, resume, schema."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bindscope.errors import InputError
from bindscope.experiments import scan
from bindscope.experiments.kit.registry import validate_file
from bindscope.prompts import load
from bindscope.results.records import read_records
from tests.experiments import planted, prompts_tiny


def _planted_scan(tokenizer, tmp_path, *, null: bool, down: float = 1e-3):
    rows = [r for r in planted.prompt_rows() if r["task"] == "recognition"]
    pset = load(prompts_tiny.write(tmp_path, rows, name="all.jsonl"))
    model = planted.one_layer_model(tokenizer)
    head = planted.top_head(model, pset.records)
    if null:
        planted.plant(model, None, down=down)  # no head matters
    else:
        planted.plant(model, head, up=20.0, down=0.02)  # one head carries the answer
    answered = planted.answered_by_model(model, list(pset.records))
    path = prompts_tiny.write(tmp_path, [r.to_dict() for r in answered], name="answered.jsonl")
    summary = scan.run(
        model, prompts=path, out=tmp_path / "out", seed=3, n_resamples=999, progress=False
    )
    return head, next(iter(summary["models"].values()))


def test_planted_head_is_the_top_significant_head(byte_tokenizer, tmp_path):
    head, m = _planted_scan(byte_tokenizer, tmp_path, null=False)
    # the planted head decides the choice: its ablation costs accuracy, significantly
    accuracy = m["metrics"]["accuracy"]
    best = accuracy["top"][0]
    assert best["head"] == [0, head]
    assert best["p_adjusted"] < 0.05 and best["low"] > 0
    assert accuracy["significant"] == [[0, head]]
    # and the largest mean log-prob drop (its CI is wide: the head's 20x output moves the
    # correct choice's log-prob both ways on different prompts)
    assert m["metrics"]["logprob"]["top"][0]["head"] == [0, head]


def test_null_model_has_no_significant_head(byte_tokenizer, tmp_path):
    _, m = _planted_scan(byte_tokenizer, tmp_path, null=True)
    # every head scaled by 1e-3: no head changes any answer
    assert m["metrics"]["accuracy"]["significant"] == []
    # the log-probs still move, by a hundredth at most (deterministically, so 20 prompts can
    # tell such a small shift from zero): a real, tiny effect, 60x below the planted head's
    assert max(abs(c["value"]) for c in m["metrics"]["logprob"]["top"]) < 0.02
    # heads whose output is exactly zero: no effect anywhere, nothing significant
    (tmp_path / "zero").mkdir()
    _, m = _planted_scan(byte_tokenizer, tmp_path / "zero", null=True, down=0.0)
    for metric in ("logprob", "accuracy"):
        assert m["metrics"][metric]["significant"] == [], metric


def test_records_schema_resume_and_bsi_correlation(tiny_llama, tiny_prompts, tmp_path):
    out = tmp_path / "out"
    kwargs = {"prompts": tiny_prompts, "out": out, "n_resamples": 199, "progress": False}
    full = scan.run(tiny_llama, **kwargs)
    path = out / "scan" / "records.jsonl"
    n_scan = tiny_llama.n_layers * tiny_llama.n_heads + 1
    assert validate_file(path) == len(scan.scannable(load(tiny_prompts))) * (n_scan + 1)
    # interrupt: drop the last third of the lines and cut the last one in half
    lines = path.read_text().splitlines()
    keep = lines[: 2 * len(lines) // 3]
    path.write_text("\n".join(keep) + "\n" + lines[len(keep)][:40])
    resumed = scan.run(tiny_llama, **kwargs)
    assert json.dumps(resumed, sort_keys=True) == json.dumps(full, sort_keys=True)
    assert len(list(read_records(path))) == len(lines)
    m = next(iter(full["models"].values()))
    effect = np.array(m["metrics"]["logprob"]["effect"], dtype=float)
    assert effect.shape == (tiny_llama.n_layers, tiny_llama.n_heads)
    corr = m["bsi_vs_effect"]
    assert corr is not None and corr["low"] <= corr["value"] <= corr["high"]


def test_layer_unit_and_holm(tiny_llama, tiny_prompts, tmp_path):
    summary = scan.run(
        tiny_llama,
        prompts=tiny_prompts,
        out=tmp_path / "out",
        unit="layer",
        ablation="mean",
        correction="holm",
        n_resamples=199,
        progress=False,
    )
    m = next(iter(summary["models"].values()))
    assert np.array(m["metrics"]["logprob"]["effect"], dtype=float).shape == (
        tiny_llama.n_layers,
        1,
    )
    assert summary["correction"] == "holm" and "bsi_vs_effect" not in m
    # `bindscope summarize` keeps the run's correction and resamples
    again = scan.summarize(tmp_path / "out" / "scan")
    assert again == summary
    validate_file(tmp_path / "out" / "scan" / "records.jsonl")


def test_records_with_a_target_are_scanned_by_its_logprob(tiny_llama, tmp_path):
    rows = [
        {
            "prompt_id": f"gen_00{i}",
            "term": "screen reader",
            "task": "generation",
            "template": f"{stem} a screen reader",
            "max_tokens": 5,
            "target": "reads the page aloud",  # one space is put before it
        }
        for i, stem in enumerate(["In web accessibility,", "Blind users use", "We test"])
    ]
    path = prompts_tiny.write(tmp_path, rows, name="targets.jsonl")
    summary = scan.run(tiny_llama, prompts=path, out=tmp_path / "out", n_resamples=99,
                       progress=False)  # fmt: skip
    m = next(iter(summary["models"].values()))
    assert m["n_prompts"] == 3 and "accuracy" not in m["metrics"]
    assert validate_file(tmp_path / "out" / "scan" / "records.jsonl") > 3
    records = list(read_records(tmp_path / "out" / "scan" / "records.jsonl"))
    clean = [r for r in records if r["experiment"] == "scan" and r["condition"] == "clean"]
    ids = tiny_llama.tokenize(rows[0]["template"])
    target = tiny_llama.tokenizer(" " + rows[0]["target"], add_special_tokens=False)["input_ids"]
    logits = tiny_llama.logits([ids + target])[0]  # prompt and target tokenized apart
    logp = logits.log_softmax(-1)
    want = np.mean([float(logp[len(ids) + j - 1, t]) for j, t in enumerate(target)])
    got = next(r for r in clean if r["prompt_id"] == "gen_000")["metrics"]["logprob"]
    from tests.tolerance import logit_bound

    # a mean log-prob: twice the logits' rounding bound (log-softmax)
    assert abs(got - want) <= 2 * logit_bound(tiny_llama, [rows[0]["template"]])


def test_binding_top_against_class_matched_sets(tiny_llama, tiny_prompts, tmp_path):
    effect = [[0.9, 0.1, 0.0, 0.2], [0.0, 0.3, 0.1, 0.0]]
    bsi = np.array([[0.8, 0.1, 0.0, 0.0], [0.0, 0.7, 0.0, 0.1]])
    primary = [
        ["sink", "sink", "other", "other"],
        ["other", "previous_token", "previous_token", "sink"],
    ]
    found = scan.matched_comparison(effect, bsi, primary, k=2, n=9, seed=0)
    assert found["top"] == [[0, 0], [1, 1]]  # the EB* top-2
    assert found["top_classes"] == ["sink", "previous_token"]
    for heads in found["random_sets"]:  # each random set copies the top set's classes
        assert sorted(primary[h][k] for h, k in heads) == ["previous_token", "sink"]
    assert found["top_effect"] == (0.9 + 0.3) / 2
    beaten = sum(r >= found["top_effect"] for r in found["random_effects"])
    assert found["p_value"] == (1 + beaten) / 10 and found["p_floor"] == 0.1
    # end to end: the classes are measured, stored and compared in the summary
    out = tmp_path / "out"
    summary = scan.run(
        tiny_llama, prompts=tiny_prompts, out=out, n_resamples=99, matched_classes=5, k=2,
        progress=False,
    )  # fmt: skip
    classes = json.loads((out / "scan" / "classes.json").read_text())
    (label,) = summary["models"]
    assert len(classes[label]) == tiny_llama.n_layers
    block = summary["models"][label]["binding_top_vs_matched"]
    assert "skipped" in block or {"logprob", "accuracy"} <= set(block)


@pytest.mark.parametrize(
    ("options", "flag"),
    [({"matched_classes": -1}, "--matched-classes 0"), ({"matched_classes": 3, "k": 0}, "--k 1")],
)
def test_negative_matched_classes_and_k_below_one_are_refused(options, flag):
    # they reached the summary before: -1 random sets divided by zero, k=0 compared no head
    with pytest.raises(InputError, match=f"pass {flag} or more"):
        scan.ScanOptions.of(options)


def test_resample_scan_records_its_donors_and_differs_from_zero(tiny_llama, tiny_prompts, tmp_path):
    kwargs = {"prompts": tiny_prompts, "n_resamples": 99, "limit": 4, "progress": False}
    resampled = scan.run(tiny_llama, out=tmp_path / "r", ablation="resample", **kwargs)
    zeroed = scan.run(tiny_llama, out=tmp_path / "z", **kwargs)
    path = tmp_path / "r" / "scan" / "records.jsonl"
    assert validate_file(path) > 0
    records = list(read_records(path))
    donors = {r["prompt_key"]: r["metrics"]["donor"] for r in records if r["experiment"] == "scan"}
    assert donors and all(d != p for p, d in donors.items())  # never a prompt's own outputs
    assert scan.draw_donors(scan.scannable(load(tiny_prompts))[:4], 0) == {
        k: next(x for x in scan.scannable(load(tiny_prompts)) if x.key == v)
        for k, v in donors.items()
    }  # the recorded draw is the seeded one
    (label,) = resampled["models"]
    a = np.array(resampled["models"][label]["metrics"]["logprob"]["effect"], dtype=float)
    b = np.array(zeroed["models"][label]["metrics"]["logprob"]["effect"], dtype=float)
    assert np.abs(a - b).max() > 1e-3  # the ablation kind reaches the computation
