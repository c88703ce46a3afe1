"""Summaries state their own limits; the terminal summary and the report only read them."""

from __future__ import annotations

import pytest

from bindscope.experiments import binding_run, c5, limits
from bindscope.experiments.text import summary_lines
from bindscope.figures import write_report
from bindscope.prompts.records import PromptRecord, PromptSet
from tests.experiments import prompts_tiny


@pytest.mark.parametrize(("n_random", "flagged"), [(0, True), (10, True), (19, False), (39, False)])
def test_p_resolution_is_flagged_when_the_bound_exceeds_the_level(n_random, flagged):
    found = limits.p_resolution("m", n_random)
    assert (found is not None) == flagged  # 1/(N+1) > 0.05 iff N < 19
    if found:
        assert found["min_p"] == pytest.approx(1 / (n_random + 1))
        assert f"1/{n_random + 1}" in found["message"]


@pytest.mark.parametrize(
    ("baseline", "kind"), [(0.016, "floor"), (0.0999, "floor"), (0.5, None), (0.95, "ceiling")]
)
def test_floor_and_ceiling(baseline, kind):
    found = limits.floor_ceiling("m", "generation score", baseline)
    assert (found and found["kind"]) == kind


def test_c5_with_few_random_sets_says_its_p_cannot_reject(tiny_llama, tiny_prompts, tmp_path):
    summary = c5.run(
        tiny_llama,
        prompts=tiny_prompts,
        out=tmp_path,
        k=2,
        n_random=3,
        rubric=prompts_tiny.RUBRIC,
        progress=False,
    )
    kinds = {(f["kind"], f.get("task")) for f in summary["limits"]}
    assert ("p_resolution", "recognition") in kinds and ("p_resolution", "generation") in kinds
    (m,) = summary["models"].values()
    for task in ("recognition", "generation"):
        base = m["conditions"]["baseline"][task]
        expect = base < limits.FLOOR or base > limits.CEILING
        assert (
            any(f["kind"] in ("floor", "ceiling") and task in f["score"] for f in summary["limits"])
            == expect
        )
    lines = summary_lines(summary)
    assert any("limit (p_resolution)" in line and "1/4" in line for line in lines)
    text = write_report(tmp_path).read_text()
    assert "## Limits of these results" in text and "1/4 = 0.25" in text


def test_binding_summary_counts_prompts_on_the_sink(tiny_llama, byte_tokenizer, tmp_path):
    from tests.conftest import build_tiny

    model = build_tiny("gpt2", byte_tokenizer)  # no BOS: a text-initial term is on the sink
    records = (
        PromptRecord("gen_a", "screen reader", "generation", "screen reader users rely on it"),
        PromptRecord("gen_b", "screen reader", "generation", "A screen reader reads pages"),
    )
    summary = binding_run.run(
        model, prompts=PromptSet("s", records, "1" * 64), out=tmp_path, progress=False
    )
    (found,) = summary["limits"]
    assert found["kind"] == "excluded" and found["reasons"] == {"at_position_0": 1}
    assert "--prepend-bos" in found["message"]
    assert any("limit (excluded)" in line for line in summary_lines(summary))
