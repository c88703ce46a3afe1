"""C5's summary statistics on synthetic records: the tail p, one set of sets per null."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bindscope.experiments import c5
from bindscope.experiments.c5_summary import summarize_c5
from bindscope.experiments.kit.ablation_sets import (
    MATCH_SCORES,
    draw_score_matched_sets,
    random_set_support,
)
from bindscope.metrics import stats
from tests.figures.synthetic import record


def c5_records(top_shift: float, n_sets: int, *, seed: int = 0, **settings) -> list[dict]:
    """One model's recognition records over 40 items: random sets lower the margin by noise
    (heavy-tailed t3 per set), the top set by ``top_shift`` more."""
    rng = np.random.default_rng(seed)
    given = {"k": 2, "n_random": n_sets, "ablation": "zero", "seed": 0, "matched_layers": False,
             "ranking_set": "r", "ranking_sha256": "abc", **settings}  # fmt: skip
    items = [(f"term{i % 10}", f"p{i}") for i in range(40)]
    base = rng.normal(1.0, 0.2, size=len(items))
    set_drop = {f"random:{s:02d}": 0.05 * rng.standard_t(3) for s in range(n_sets)}
    out = []
    for name in ["baseline", "top", *set_drop]:
        shift = {"baseline": 0.0, "top": top_shift}.get(name, set_drop.get(name, 0.0))
        margins = base - shift - rng.normal(0, 0.01, size=len(items))
        for (term, pid), margin in zip(items, margins):
            metrics = {"score": float(margin > 0.9), "margin": float(margin)}
            out.append(record("c5", "m", term, pid, name, metrics, task="recognition",
                              heads=[[0, 0], [1, 1]] if name != "baseline" else [],
                              c5=given))  # fmt: skip
    return out


def margin_test(summary: dict, null: str = "random") -> dict:
    return next(iter(summary["models"].values()))["nulls"][null]["margin"]


def test_a_top_drop_beyond_every_set_gets_a_tail_p_and_holm_uses_it():
    summary = summarize_c5(c5_records(1.0, 199), n_resamples=999)
    test = margin_test(summary)
    assert test["p"] == pytest.approx(1 / 200) and test["exceedances"] == 0
    tail = test["tail"]
    assert tail["method"] == "gpd" and tail["p"] < 1 / 200
    assert tail["low"] <= tail["p"] <= tail["high"]
    # one model: Holm leaves the p it adjusts as it is, and it adjusts the tail p
    assert test["holm_on"] == "tail" and test["p_holm"] == test["p_used"] == tail["p"]
    lines = "\n".join(c5.text(summary))
    assert "tail p" in lines and "on the tail p" in lines


def test_a_null_top_drop_keeps_the_exact_p():
    test = margin_test(summarize_c5(c5_records(0.0, 199), n_resamples=999))
    assert test["exceedances"] >= stats.tail.MIN_EXCEEDANCES
    said = (test["tail"]["method"], test["holm_on"], test["p_used"])
    assert said == ("exact", "exact", test["p"])


def test_a_sequential_nulls_numbers_all_read_the_sets_p_used():
    # h = 2: the sequence stops at its 2nd exceedance; 30 sets were evaluated
    records = c5_records(0.0, 30, sampling="sequential", stop_at=2)
    for r in records:
        r["c5"]["n_random"] = 30
    summary = summarize_c5(records, n_resamples=999)
    m = next(iter(summary["models"].values()))
    test = m["nulls"]["random"]["margin"]
    used = test["n_drawn"]
    assert used < 30 and test["n_evaluated"] == 30
    assert len(m["random_drops"]["margin"]) == used
    assert test["random_mean"] == pytest.approx(np.mean(m["random_drops"]["margin"]))
    table = {}
    for r in records:
        table.setdefault(r["condition"], {})[r["prompt_key"]] = r["metrics"]["margin"]
    keys = sorted(table["baseline"])
    names = [f"random:{s:02d}" for s in range(used)]
    rand_mean = np.mean([[table[n][k] for k in keys] for n in names], axis=0)
    spec = np.mean(rand_mean - [table["top"][k] for k in keys])
    assert test["specificity"]["value"] == pytest.approx(spec, rel=1e-12)


def _distinct_by_brute_force(options_per_top_head: list[list[tuple[int, int]]]) -> set:
    """Every set with one option per top head and no head twice, by plain product."""
    return {
        tuple(sorted(choice))
        for choice in itertools.product(*options_per_top_head)
        if len(set(choice)) == len(choice)
    }


def test_a_layer_matched_null_uses_each_of_its_few_sets_once():
    # Gemma 3's case: 4 heads a layer, two top heads share layer 2 (2 heads left there)
    top = [[2, 3], [4, 1], [10, 1], [2, 0]]
    sets = c5.draw_random_sets(18, 4, top, k=4, n=199, seed=0, matched_layers=True)
    inside = {tuple(h) for h in top}
    options = [[(layer, h) for h in range(4) if (layer, h) not in inside] for layer, _ in top]
    every = _distinct_by_brute_force(options)
    assert len(every) == 9
    assert sorted(tuple(map(tuple, s)) for s in sets) == sorted(every)  # each once
    assert random_set_support(18, 4, top, k=4, matched_layers=True) == 9
    # the unmatched null of the same model has C(68, 4) sets: 199 distinct ones are drawn
    assert random_set_support(18, 4, top, k=4) == math.comb(68, 4)
    drawn = c5.draw_random_sets(18, 4, top, k=4, n=199, seed=0)
    assert len({tuple(map(tuple, s)) for s in drawn}) == 199


def test_a_class_matched_null_draws_no_set_twice():
    rng = np.random.default_rng(0)
    scores = {name: rng.uniform(0, 1, size=(4, 8)) for name in MATCH_SCORES}
    top = [[0, 0], [1, 1]]
    pool = [(layer, h) for layer in range(4) for h in range(8) if [layer, h] not in top]
    grid = np.stack([scores[name] for name in MATCH_SCORES], -1)
    options = []
    for layer, head in top:
        distance = [np.linalg.norm(grid[p] - grid[layer, head]) for p in pool]
        options.append([pool[i] for i in np.argsort(distance, kind="stable")[:6]])
    every = _distinct_by_brute_force(options)
    assert 10 < len(every) < 50
    many, _ = draw_score_matched_sets(scores, top, n=10, seed=1, neighbours=6)
    assert len({tuple(map(tuple, s)) for s in many}) == 10  # no repeats
    # fewer distinct sets than asked for: each once
    few, _ = draw_score_matched_sets(scores, top, n=50, seed=1, neighbours=6)
    assert sorted(tuple(map(tuple, s)) for s in few) == sorted(every)


def test_a_small_support_sets_p_floor_and_a_limit():
    records = c5_records(1.0, 9, sampling="sequential", stop_at=10)
    for r in records:
        r["c5"]["n_random"] = 199
        if r["condition"] == "top":
            r["null_support"] = {"random": {"support": 9, "n_sets": 9}}
    summary = summarize_c5(records, n_resamples=999)
    test = margin_test(summary)
    # the 9 sets are the whole null: the rule decides at them, p = 1 / 10, no tail beyond
    assert (test["stopped"], test["n_drawn"], test["p"]) == ("maximum", 9, 0.1)
    assert (test["support"], test["p_floor"], test["tail"]["method"]) == (9, 0.1, "enumerated")
    (limit,) = [f for f in summary["limits"] if f["kind"] == "small_support"]
    assert limit["support"] == 9 and limit["min_p"] == 0.1 and "only 9 distinct" in limit["message"]


def _tied_records(noise: float, seed: int) -> list[dict]:
    """8 terms x 5 items whose drops take few values (0 or +-1), plus ``noise``."""
    rng, jitter = np.random.default_rng(seed), np.random.default_rng(seed + 100)
    settings = {"k": 2, "n_random": 10, "ablation": "zero", "seed": 0, "matched_layers": False,
                "ranking_set": "r", "ranking_sha256": "abc"}  # fmt: skip
    items = [(f"term{t}", f"p{i}") for t in range(8) for i in range(5)]
    base = rng.choice([1.0, 2.0], size=len(items))
    out = []
    for name in ["baseline", "top", *(f"random:{s:02d}" for s in range(10))]:
        drops = [0.0] if name == "baseline" else [0.0, 0.0, 0.0, 1.0, -1.0]
        margins = base - rng.choice(drops, size=len(items))
        margins += jitter.uniform(-noise, noise, size=len(items))
        for (term, pid), margin in zip(items, margins):
            out.append(record("c5", "m", term, pid, name, {"score": 1.0, "margin": float(margin)},
                              task="recognition", heads=[[0, 0]] if name != "baseline" else [],
                              c5=settings))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", range(4))
def test_intervals_do_not_jump_with_float_noise(seed):
    delta = 1e-6
    clean, noisy = (
        next(iter(summarize_c5(_tied_records(noise, seed), n_resamples=1999)["models"].values()))
        for noise in (0.0, delta)
    )
    # each margin moves by at most delta, so each item's drop (baseline - ablated) and each
    # item's specificity (mean random - top) by at most 2 delta; a mean over (resampled)
    # items or terms, and so each order statistic of the same resamples, by no more
    bound = 2 * delta + 1e-12
    intervals = {
        "top drop": lambda m: m["drops"]["top"]["margin"],
        "top drop over terms": lambda m: m["drops"]["top_by_terms"]["margin"],
        "specificity": lambda m: m["specificity"]["margin"],
    }
    for name, read in intervals.items():
        for end in ("low", "high"):
            moved = abs(read(clean)[end] - read(noisy)[end])
            assert moved <= bound, (name, end, moved, read(clean)["method"])


def test_c5_limit_and_spread_take_prompts_as_scan_does(tiny_c5, tiny_prompts, tmp_path, capsys):
    from bindscope import cli
    from bindscope.errors import InputError
    from bindscope.prompts import load
    from bindscope.results.records import read_records

    records = list(load(tiny_prompts).records)
    terms = {r.term for r in records}
    assert {r.term for r in records[:3]} != terms  # the first 3 in the file miss a term
    with pytest.raises(InputError, match="add limit=N"):
        tiny_c5(spread=True)
    with pytest.raises(InputError, match="limit=0 is not a whole number >= 1"):
        tiny_c5(limit=0)
    tiny_c5(limit=len(terms), spread=True, n_random=1)
    written = [
        r for r in read_records(tmp_path / "c5" / "records.jsonl") if r["experiment"] == "c5"
    ]
    assert {r["term"] for r in written} == terms  # one prompt of each term
    assert len({r["prompt_key"] for r in written}) == len(terms)
    assert written[0]["c5"]["limit"] == len(terms) and written[0]["c5"]["spread"] is True
    ranked = [r for r in read_records(tmp_path / "c5" / "records.jsonl") if r["experiment"] != "c5"]
    assert len(ranked) == len(terms)  # the heads are ranked on the same prompts
    assert cli.main(["c5", "--spread", "--out", str(tmp_path / "o")]) == 2
    assert "--spread applies only with --limit" in capsys.readouterr().err


def _choice_records(correct: list[int], n_choices: list[int], random_shift: float) -> list[dict]:
    """Recognition records: baseline correctness as given, ``n_choices`` per item; the top set
    lowers every margin by 0.2, the random sets by ``random_shift`` (negative: raise it)."""
    settings = {"k": 2, "n_random": 5, "ablation": "zero", "seed": 0, "matched_layers": False,
                "ranking_set": "r", "ranking_sha256": "abc"}  # fmt: skip
    out = []
    shifts = {"baseline": 0.0, "top": 0.2}
    shifts.update({f"random:{s:02d}": random_shift + 0.01 * s for s in range(5)})
    for name, shift in shifts.items():
        for i, (ok, n) in enumerate(zip(correct, n_choices)):
            metrics = {"score": float(ok), "margin": 1.0 + 0.1 * i - shift,
                       "choice_scores": [0.0] * n, "prediction": 0}  # fmt: skip
            heads = [[0, 0]] if name != "baseline" else []
            out.append(record("c5", "m", f"t{i}", "p", name, metrics, task="recognition",
                              heads=heads, c5=settings))  # fmt: skip
    return out


def test_chance_level_is_stated_and_the_floor_judged_against_it():
    # 10 items, 4 choices each: chance 0.25; a baseline of 0.3 is 0.07 of the room above it
    correct = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    summary = summarize_c5(_choice_records(correct, [4] * 10, 0.0), n_resamples=999)
    m = next(iter(summary["models"].values()))
    assert m["chance"] == {"recognition": 0.25}
    (floor,) = [f for f in summary["limits"] if f["kind"] == "floor"]
    assert floor["chance"] == 0.25 and floor["baseline"] == pytest.approx(0.3)
    assert "chance 0.250" in floor["message"]
    assert "chance level, recognition: 0.250" in "\n".join(c5.text(summary))
    # true/false items (chance 0.5) with mixed 4-choice ones: 1/choices averaged over items
    mixed = summarize_c5(_choice_records(correct, [2] * 5 + [4] * 5, 0.0), n_resamples=999)
    assert next(iter(mixed["models"].values()))["chance"]["recognition"] == pytest.approx(0.375)


def test_random_sets_that_raise_the_score_are_said_to_inflate_specificity():
    correct = [1] * 6 + [0] * 4
    summary = summarize_c5(_choice_records(correct, [4] * 10, -0.3), n_resamples=999)
    gains = [f for f in summary["limits"] if f["kind"] == "random_gain"]
    (margin,) = [f for f in gains if f["score"] == "margin"]
    assert margin["random_mean"] < 0 and margin["top_drop"] == pytest.approx(0.2)
    assert "exceeds the top set's own drop" in margin["message"]
    m = next(iter(summary["models"].values()))
    spec = m["specificity"]["margin"]["value"]
    assert spec == pytest.approx(margin["top_drop"] - margin["random_mean"])
    # random sets that lower the score: no such limit
    lowered = summarize_c5(_choice_records(correct, [4] * 10, 0.1), n_resamples=999)
    assert not [f for f in lowered["limits"] if f["kind"] == "random_gain"]


def test_the_figure_marks_the_chance_level():
    from bindscope.figures.c5 import model_figure

    correct = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    summary = summarize_c5(_choice_records(correct, [4] * 10, 0.0), n_resamples=999)
    label, entry = next(iter(summary["models"].items()))
    fig, caption = model_figure(label, entry, k=2)
    accuracy = fig.axes[0]  # the first column's scores
    levels = {float(y) for line in accuracy.get_lines() for y in set(line.get_ydata())}
    assert 0.25 in levels and "chance level" in caption
