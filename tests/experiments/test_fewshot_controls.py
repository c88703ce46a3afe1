"""Few-shot (C3) and discriminant-validity experiments end to end on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.errors import InputError
from bindscope.experiments import controls, fewshot
from bindscope.experiments.kit.registry import validate_file
from bindscope.metrics import stats
from bindscope.prompts import load
from bindscope.results.records import read_records
from bindscope.runners.behaviour import generation
from tests.experiments import prompts_tiny


def test_fewshot_records_and_deltas(tiny_llama, tiny_prompts, tmp_path):
    summary = fewshot.run(
        tiny_llama,
        prompts=tiny_prompts,
        out=tmp_path,
        exemplars=prompts_tiny.EXEMPLARS,
        rubric=prompts_tiny.RUBRIC,
        progress=False,
    )
    n_gen = sum(r["task"] == "generation" for r in prompts_tiny.records())
    assert validate_file(tmp_path / "fewshot" / "records.jsonl") == 3 * n_gen
    m = next(iter(summary["models"].values()))
    records = list(read_records(tmp_path / "fewshot" / "records.jsonl"))
    by = {(r["prompt_key"], r["condition"]): r["metrics"]["score"] for r in records}
    keys = sorted({k for k, _ in by})
    zero = np.array([by[k, "zero_shot"] for k in keys])
    few = np.array([by[k, "few_shot"] for k in keys])
    assert m["conditions"]["few_shot"] == pytest.approx(few.mean())
    assert m["delta_points"]["few_shot"]["value"] == pytest.approx(100 * (few - zero).mean())
    expected = stats.paired_permutation(few, zero, seed=0).p_value
    assert m["test"]["few_shot"]["p_value"] == pytest.approx(expected)


def test_fewshot_prefix_is_what_the_model_sees(tiny_llama, tiny_prompts):
    recs = [r for r in load(tiny_prompts) if r.task == "generation"][:2]
    prefix = fewshot.prefixes(prompts_tiny.EXEMPLARS)["few_shot"]
    direct = tiny_llama.generate(
        [prefix[r.term] + r.template for r in recs], max_new_tokens=recs[0].max_tokens
    )
    scored = generation(tiny_llama, recs, prefix=prefix, rubric=prompts_tiny.RUBRIC)
    assert [s.text for s in scored] == direct


def test_fewshot_missing_exemplar_is_named(tiny_llama, tiny_prompts, tmp_path):
    partial = {"terms": {"screen reader": prompts_tiny.EXEMPLARS["terms"]["screen reader"]}}
    with pytest.raises(InputError, match="skip link"):
        fewshot.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, exemplars=partial)


def test_controls_compare_groups_with_real_terms(tiny_llama, tiny_prompts, tiny_controls, tmp_path):
    summary = controls.run(
        tiny_llama, controls=tiny_controls, real=tiny_prompts, out=tmp_path, progress=False
    )
    validate_file(tmp_path / "controls" / "records.jsonl")
    m = next(iter(summary["models"].values()))
    assert set(m["groups"]) == set(prompts_tiny.CONTROL_GROUPS)
    records = list(read_records(tmp_path / "controls" / "records.jsonl"))
    ok = [r for r in records if r["metrics"]["eb_star"] is not None]
    real = np.array([r["metrics"]["eb_star"] for r in ok if r["control_group"] is None])
    assert m["real"]["n"] == len(real)
    for name, row in m["groups"].items():
        group = np.array([r["metrics"]["eb_star"] for r in ok if r["control_group"] == name])
        assert row["n"] == len(group)
        assert row["family"] == prompts_tiny.CONTROL_GROUPS[name][0]
        assert row["eb_star"]["value"] == pytest.approx(group.mean())
        assert row["cohens_d"]["value"] == pytest.approx(stats.cohens_d(real, group))
        assert row["p_holm"] >= row["test"]["p_value"]
        matched = row["matched"]
        assert matched["n"] <= row["n"] and set(matched["span_lengths"]) <= {
            r["metrics"]["n_span"] for r in ok if r["control_group"] == name
        }


def test_controls_summary_handles_degenerate_groups():
    def rec(group, eb, n_span=2):
        return {
            "experiment": "controls",
            "model": "m",
            "revision": None,
            "term": "t",
            "control_group": group,
            "control_family": "V1" if group else None,
            "metrics": {"eb_star": eb, "n_span": n_span, "skipped": None},
            "provenance": {"seed": 0},
        }

    records = [rec(None, 0.5), rec(None, 0.6), rec(None, 0.7), rec("g", 0.2, 5)]
    row = controls.summarize_controls(records)["models"]["m@main"]["groups"]["g"]
    assert row["cohens_d"] is None and row["test"] is None  # one item: nothing to test
    assert row["matched"]["n"] == 0 and row["matched"]["span_lengths"] == []
