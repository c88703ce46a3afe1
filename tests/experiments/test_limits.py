"""Summaries state their own limits; the terminal summary and the report only read them."""

from __future__ import annotations

import pytest

from bindscope.experiments import binding as binding_experiment
from bindscope.experiments.kit import limits
from bindscope.experiments.kit.registry import summary_lines
from bindscope.figures import write_report
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet


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


def test_c5_with_few_random_sets_says_its_p_cannot_reject(tiny_c5, tmp_path):
    summary = tiny_c5()
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
    summary = binding_experiment.run(
        model, prompts=PromptSet("s", records, "1" * 64), out=tmp_path, progress=False
    )
    (found,) = summary["limits"]
    assert found["kind"] == "excluded" and found["reasons"] == {"at_position_0": 1}
    assert "--prepend-bos" in found["message"]
    assert any("limit (excluded)" in line for line in summary_lines(summary))


@pytest.mark.parametrize(("n_pairs", "n_resamples"), [(3, 9999), (5, 9999), (9, 999), (20, 99)])
def test_sign_flip_floor_is_the_smallest_p_scipy_gives(n_pairs, n_resamples):
    """The floor equals scipy's p for the most extreme sample (every difference positive).

    Exact (2^n <= resamples) or with random patterns that almost surely miss the observed
    one (99 of 2^20); a random draw that hits it would only raise p.
    """
    from bindscope.metrics import stats

    a = [1.0 + i for i in range(n_pairs)]
    b = [0.0] * n_pairs
    found = stats.paired_permutation(a, b, alternative="two-sided", n_resamples=n_resamples)
    assert limits.sign_flip_floor(n_pairs, n_resamples) == pytest.approx(found.p_value)


@pytest.mark.parametrize(
    ("n_pairs", "n_resamples", "n_tests", "flagged", "nothing_rejects"),
    [
        (10, 9999, 270, True, False),  # 2/1024 = 0.002; x 270 = 0.53
        (4, 9999, 1, True, True),  # 2/16 = 0.125: above the level on its own
        (20, 99999, 10, False, False),  # 2/100000 x 10 = 0.0002
        (20, 9999, 270, True, False),  # the resamples, not the prompts, bound it: 0.054
    ],
)
def test_corrected_resolution(n_pairs, n_resamples, n_tests, flagged, nothing_rejects):
    found = limits.corrected_resolution(
        "m", "scan", n_pairs=n_pairs, n_resamples=n_resamples, n_tests=n_tests, correction="bh"
    )
    assert (found is not None) == flagged
    if found:
        assert found["min_p_alone"] == pytest.approx(
            min(1.0, limits.sign_flip_floor(n_pairs, n_resamples) * n_tests)
        )
        assert ("nothing can reject" in found["message"]) == nothing_rejects


@pytest.mark.parametrize("n", [1, 4, 5, 12])
def test_binomial_resolution_matches_scipy(n):
    from scipy.stats import binomtest

    best = binomtest(n, n, 0.5, alternative="greater").pvalue  # every term leads
    found = limits.binomial_resolution("m", "lead-lag", n)
    assert (found is not None) == (best > limits.ALPHA)
    if found:
        assert found["min_p"] == pytest.approx(best)


def test_sweep_scan_patching_and_heads_summaries_state_limits():
    """Each summary computes its own limits; the terminal lines print them."""
    from bindscope.experiments.kit.taxonomy_summary import summarize_heads
    from bindscope.experiments.patching import summarize_patching
    from bindscope.experiments.scan import summarize_scan
    from bindscope.experiments.sweep import summarize_sweep
    from tests.figures import synthetic

    scan = summarize_scan(synthetic.study("scan").scan_records(), n_resamples=199)
    # 6 prompts: a sign-flip p cannot go below 2/64; x 12 heads is far above 0.05
    found = [f for f in scan["limits"] if f["kind"] == "p_resolution"]
    assert found and all(f["min_p"] == pytest.approx(2 / 2**6) for f in found)
    assert any("limit (p_resolution)" in line for line in summary_lines(scan))
    patch = summarize_patching(synthetic.study("patching").patching_records(), n_resamples=199)
    assert any(f["kind"] == "p_resolution" and f["where"] == "recovery" for f in patch["limits"])
    sweep = summarize_sweep(synthetic.study("sweep").sweep_records())
    # 4 checkpoints, 3 terms: lead-lag runs but its binomial test cannot go below 1/8;
    # decoupling needs 3+ checkpoints per window and is not run
    (entry,) = sweep["models"].values()
    assert "skipped" not in entry["leadlag"] and "skipped" in entry["decoupling"]
    kinds = {(f["kind"], f.get("group") or f.get("where")) for f in sweep["limits"]}
    assert ("small_group", "decoupling") in kinds
    assert ("p_resolution", "lead-lag binomial test (pearson)") in kinds
    heads = summarize_heads(synthetic.study("heads").heads_records())
    assert heads["limits"] == []  # every prompt has a span and 3 repeated sequences ran
    one = [r for r in synthetic.study("heads").heads_records() if r["condition"] == "clean"][:1]
    small = summarize_heads(one)
    assert {f["kind"] for f in small["limits"]} >= {"small_group"}


@pytest.mark.parametrize("n_tests", [1, 12, 270, 1000])
def test_default_resamples_let_one_head_pass_the_correction(n_tests):
    """The scan's default resamples never leave a single head unable to pass (20 prompts)."""
    from bindscope.experiments.kit.per_head_tests import MIN_RESAMPLES, default_resamples

    used = default_resamples(n_tests)
    assert used >= MIN_RESAMPLES
    options = {"n_pairs": 20, "n_tests": n_tests, "correction": "holm"}
    assert limits.corrected_resolution("m", "scan", n_resamples=used, **options) is None
    if n_tests >= 270:  # the fixed old default could not: 2 / 10000 x 270 = 0.054
        assert limits.corrected_resolution("m", "scan", n_resamples=9999, **options)


def test_scan_summary_records_the_resamples_it_used():
    from bindscope.experiments.scan import summarize_scan
    from tests.figures import synthetic

    default = summarize_scan(synthetic.study("scan").scan_records())
    asked = summarize_scan(synthetic.study("scan").scan_records(), n_resamples=199)
    assert default["n_resamples"] is None and asked["n_resamples"] == 199
    assert {m["n_resamples"] for m in default["models"].values()} == {9999}  # 12 heads
    assert {m["n_resamples"] for m in asked["models"].values()} == {199}


def test_few_items_is_where_the_bootstrap_interval_stops_covering_90_percent():
    """FEW_ITEMS is as docs/records.md states it: for normal items the percentile
    bootstrap's "95%" interval (mean +- 1.96 s sqrt((n-1)/n) / sqrt(n)) covers the mean
    with probability P(|t_{n-1}| < 1.96 sqrt((n-1)/n)), first 0.90 at FEW_ITEMS items."""
    import math

    from scipy.stats import norm, t

    def coverage(n: int) -> float:
        return 2 * t.cdf(norm.ppf(0.975) * math.sqrt((n - 1) / n), n - 1) - 1

    assert coverage(limits.FEW_ITEMS - 1) < 0.90 <= coverage(limits.FEW_ITEMS)


def _c5_records(n_items: int) -> list[dict]:
    """One model's C5 records on ``n_items`` items, each its own term, two random sets;
    the items' drops differ, so each CI is an interval, not a point."""
    from tests.figures.synthetic import record

    settings = {"k": 2, "n_random": 2, "ablation": "zero", "seed": 0,
                "matched_layers": False, "ranking_set": "r", "ranking_sha256": "abc"}  # fmt: skip
    # item i drops d x (1 + i) under each condition
    drop = {"baseline": 0.0, "top": 0.5, "random:00": 0.01, "random:01": 0.02}
    return [
        record("c5", "m", f"term{i}", "p0", name, {"score": 1.0, "margin": 1.0 - d * (1 + i)},
               task="recognition", heads=[[0, 0]] if name != "baseline" else [], c5=settings)
        for name, d in drop.items()
        for i in range(n_items)
    ]  # fmt: skip


@pytest.mark.parametrize("n_items", [2, limits.FEW_ITEMS - 1, limits.FEW_ITEMS])
def test_c5_flags_intervals_over_too_few_items(n_items):
    """C5 on 2 items printed a "95% CI" that was the two items' drops, without a word."""
    from bindscope.experiments.c5_summary import summarize_c5

    summary = summarize_c5(_c5_records(n_items), n_resamples=199)
    few = {f["score"]: f for f in summary["limits"] if f["kind"] == "few_items"}
    if n_items >= limits.FEW_ITEMS:
        assert not few
        return
    assert set(few) == {"recognition", "margin"}  # every score whose drops got a CI
    assert few["margin"]["n"] == n_items and few["margin"]["minimum"] == limits.FEW_ITEMS
    assert f"rest on {n_items} item(s)" in few["margin"]["message"]
    lines = summary_lines(summary)
    assert any(few["margin"]["message"] in line for line in lines)  # printed with the numbers


@pytest.mark.parametrize("key", sorted(limits.MESSAGES))
def test_note_formats_its_message_after_its_numbers(key):
    """A note is kind, model, its numbers in call order, then its message; the words that
    only the message needs stay out of the record; a ``kind:variant`` key keeps its kind."""
    import string

    fields = {f for _, f, _, _ in string.Formatter().parse(limits.MESSAGES[key]) if f}
    values = dict.fromkeys(sorted(fields - {"model", "ALPHA"}), 0.5)
    numbers = dict(list(values.items())[: len(values) // 2])
    words = {f: v for f, v in values.items() if f not in numbers}
    found = limits.note(key, "m", words=words, **numbers)
    assert list(found) == ["kind", "model", *numbers, "message"]
    assert found["kind"] == key.partition(":")[0] and found["model"] == "m"
    assert found["message"] == limits.MESSAGES[key].format(model="m", ALPHA=limits.ALPHA, **values)
