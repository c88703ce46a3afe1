"""C5 end to end on tiny models: planted effect found, null shows none, resume, schema."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bindscope.experiments import c5
from bindscope.experiments.kit.registry import validate_file
from bindscope.prompts import load
from bindscope.results.records import read_records
from tests.experiments import planted, prompts_tiny


def _planted(tokenizer, tmp_path, *, null: bool):
    """A one-layer model with one planted head (or none), and the C5 options that test it."""
    rows = [r for r in planted.prompt_rows() if r["task"] == "recognition"]
    pset = load(prompts_tiny.write(tmp_path, rows, name="all.jsonl"))
    model = planted.one_layer_model(tokenizer)
    head = planted.top_head(model, pset.records)
    if null:
        planted.plant(model, None, down=1e-3)  # no head matters
    else:
        planted.plant(model, head, up=20.0, down=0.02)  # one head carries the answer
    answered = planted.answered_by_model(model, list(pset.records))
    path = prompts_tiny.write(tmp_path, [r.to_dict() for r in answered], name="answered.jsonl")
    options = {"prompts": path, "ranking": tmp_path / "all.jsonl", "k": 2, "seed": 3,
               "rubric": prompts_tiny.RUBRIC, "progress": False}  # fmt: skip
    return model, head, options


def _planted_run(tokenizer, tmp_path, *, null: bool, **options):
    model, head, given = _planted(tokenizer, tmp_path, null=null)
    summary = c5.run(model, out=tmp_path / "out", **{**given, "n_random": 30, **options})
    return head, next(iter(summary["models"].values()))


def test_planted_head_shows_as_specific_top_drop(byte_tokenizer, tmp_path):
    head, m = _planted_run(byte_tokenizer, tmp_path, null=False)
    assert [0, head] in m["top_heads"]
    assert m["conditions"]["baseline"]["recognition"] == 1.0  # answers are its own choices
    spec = m["specificity"]["recognition"]
    assert spec["low"] > 0, spec
    # no random set reaches the top drop: the sequence runs to its maximum. One layer of 8
    # heads holds C(6, 2) = 15 distinct 2-head sets outside the top set: each is used once
    # (not 30 draws from 15), so p = 1 / 16, the floor a test over 16 sets has
    test = m["nulls"]["random"]["recognition"]
    assert (test["stopped"], test["n_drawn"], test["p"]) == ("maximum", 15, 1 / 16)
    assert test["support"] == 15 and test["p_floor"] == 1 / 16
    assert m["drops"]["top"]["recognition"]["value"] > 0.3
    assert m["drops"]["bottom"]["recognition"]["value"] < m["drops"]["top"]["recognition"]["value"]


def test_null_model_shows_no_specific_drop(byte_tokenizer, tmp_path):
    _, m = _planted_run(byte_tokenizer, tmp_path, null=True)
    spec = m["specificity"]["recognition"]
    assert spec["low"] <= 0 <= spec["high"], spec
    assert m["p_value"]["recognition"] > 0.05
    assert m["drops"]["top"]["recognition"]["value"] == pytest.approx(0.0, abs=0.05)


def test_records_match_schema_and_conditions(tiny_c5, tmp_path):
    summary = tiny_c5()
    path = tmp_path / "c5" / "records.jsonl"
    n = validate_file(path)
    n_prompts = len(prompts_tiny.records())
    assert n == n_prompts * (3 + 3) + n_prompts  # 6 conditions + ranking records
    m = next(iter(summary["models"].values()))
    assert sorted(m["conditions"]) == [
        "baseline",
        "bottom",
        "random:00",
        "random:01",
        "random:02",
        "top",
    ]
    top = {tuple(h) for h in m["top_heads"]}
    for heads in m["random_heads"]:
        assert len(heads) == 2 and not top & {tuple(h) for h in heads}
    on_disk = json.loads((tmp_path / "c5" / "summary.json").read_text())
    assert on_disk["models"].keys() == summary["models"].keys()


def test_resume_after_crash_gives_the_same_summary(tiny_llama, tiny_prompts, tmp_path):
    options = {"prompts": tiny_prompts, "k": 2, "n_random": 1, "rubric": prompts_tiny.RUBRIC}
    whole = c5.run(tiny_llama, out=tmp_path / "a", progress=False, batch_size=4, **options)

    calls = {"n": 0}
    real = c5.recognition

    def crashing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    c5.recognition = crashing
    try:
        with pytest.raises(KeyboardInterrupt):
            c5.run(tiny_llama, out=tmp_path / "b", progress=False, batch_size=4, **options)
    finally:
        c5.recognition = real
    partial = list(read_records(tmp_path / "b" / "c5" / "records.jsonl"))
    assert 0 < len(partial) < len(list(read_records(tmp_path / "a" / "c5" / "records.jsonl")))
    resumed = c5.run(tiny_llama, out=tmp_path / "b", progress=False, batch_size=4, **options)
    strip = lambda s: json.loads(json.dumps(s))  # noqa: E731
    assert strip(resumed) == strip(whole)


def test_mean_ablation_and_matched_layers_run(tiny_llama, tiny_prompts, tmp_path):
    summary = c5.run(
        tiny_llama,
        prompts=tiny_prompts,
        out=tmp_path,
        k=2,
        n_random=2,
        ablation="mean",
        matched_layers=True,
        rubric=prompts_tiny.RUBRIC,
        progress=False,
    )
    m = next(iter(summary["models"].values()))
    top_layers = sorted(h[0] for h in m["top_heads"])
    assert len(m["null_heads"]["layers"]) == 2 == len(m["random_heads"])
    for heads in m["null_heads"]["layers"]:
        assert sorted(h[0] for h in heads) == top_layers
    # issue 44: the documented Python call draws the same layer-matched sets (default seed 0)
    model = tiny_llama
    drawn = c5.draw_random_sets(
        model.n_layers, model.n_heads, m["top_heads"], k=2, n=2, seed=0, matched_layers=True
    )
    assert m["null_heads"]["layers"] == drawn
    # the layer-matched null is a second null beside the unmatched one, each with its own p
    assert m["nulls"]["layers"]["recognition"]["n_drawn"] == 2
    assert m["nulls"]["random"]["recognition"]["p"] == m["p_value"]["recognition"]
    assert summary["ablation"] == "mean"
    validate_file(tmp_path / "c5" / "records.jsonl")


def test_several_models_get_holm_correction(sp_tokenizer, byte_tokenizer, tiny_c5):
    from tests.conftest import build_tiny

    a = build_tiny("llama", sp_tokenizer)
    b = build_tiny("qwen2", byte_tokenizer)
    a.name, b.name = "tiny-a", "tiny-b"
    summary = tiny_c5([a, b])
    assert len(summary["models"]) == 2
    for m in summary["models"].values():
        assert m["p_holm"]["recognition"] >= m["p_value"]["recognition"]
    # 3 sets: p >= 1/4, and Holm over 2 models lifts the smallest to 0.5: stated, with a fix
    (floor,) = [f for f in summary["limits"] if f["model"] == "all models"]
    assert floor["min_p"] == 0.5 and "--n-random 39 or more" in floor["message"]


def test_random_sets_are_reproducible_and_exclude_top():
    top = [[0, 1], [2, 3]]
    a = c5.draw_random_sets(3, 4, top, k=2, n=5, seed=7)
    assert a == c5.draw_random_sets(3, 4, top, k=2, n=5, seed=7)
    assert a != c5.draw_random_sets(3, 4, top, k=2, n=5, seed=8)
    assert all(h not in top for s in a for h in s)
    with pytest.raises(ValueError, match="cannot draw"):
        c5.draw_random_sets(1, 2, [[0, 0]], k=2, n=1, seed=0)


def test_bad_ablation_name_is_refused(tiny_llama, tiny_prompts, tmp_path):
    with pytest.raises(ValueError, match="zero"):
        c5.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, ablation="resample")


def test_resuming_with_other_settings_is_refused(tiny_llama, tiny_prompts, tmp_path):
    from bindscope.errors import InputError

    options = {"prompts": tiny_prompts, "out": tmp_path, "rubric": prompts_tiny.RUBRIC}
    c5.run(tiny_llama, k=2, n_random=1, progress=False, **options)
    with pytest.raises(InputError, match="n_random"):
        c5.run(tiny_llama, k=2, n_random=2, progress=False, **options)
    summary = c5.run(tiny_llama, k=2, n_random=2, progress=False, force=True, **options)
    assert summary["n_random"] == 2


def _drops_from_records(path, score):
    """Per random set (in draw order), the mean drop over items: plain Python from records."""
    table = {}
    for r in read_records(path):
        if r["experiment"] != "c5" or r["task"] != "recognition":
            continue
        value = r["metrics"]["score"] if score == "recognition" else r["metrics"]["margin"]
        table.setdefault(r["condition"], {})[r["prompt_key"]] = value
    keys = sorted(table["baseline"])

    def drop(name):
        return sum(table["baseline"][k] - table[name][k] for k in keys) / len(keys)

    names = sorted((c for c in table if c.startswith("random:")), key=lambda c: int(c[7:]))
    return drop("top"), [drop(n) for n in names]


def _besag_clifford(top, drops, h):
    """(stopped, sets drawn, p) by the rule, written out by hand."""
    hits = [i + 1 for i, d in enumerate(drops) if d >= top]  # draws that reach the top drop
    if len(hits) >= h:
        return "reached", hits[h - 1], h / hits[h - 1]
    return "maximum", len(drops), (len(hits) + 1) / (len(drops) + 1)


def _check_sequential(m, path, h, most):
    drawn = []
    for score in ("recognition", "margin"):
        test = m["nulls"]["random"][score]
        top, drops = _drops_from_records(path, score)
        stopped, n, p = _besag_clifford(top, drops[:most], h)
        assert (test["stopped"], test["n_drawn"]) == (stopped, n)
        assert test["p"] == pytest.approx(p, rel=1e-12)
        drawn.append(n)
    # the run evaluates blocks of 2h, 3h, 4h, ... sets and stops at the first that decides
    # all, or when the null's distinct sets (its support) run out
    blocks = [*range(2 * h, most, h), most]
    evaluated = next(b for b in blocks if b >= max(drawn))
    assert len(m["random_heads"]) == min(evaluated, m["null_support"]["random"]["support"])
    return drawn


def test_sequential_null_stops_early_with_the_besag_clifford_p(tiny_c5, tmp_path):
    summary = tiny_c5(n_random=40, stop_at=2)
    m = next(iter(summary["models"].values()))
    _check_sequential(m, tmp_path / "c5" / "records.jsonl", 2, 40)
    assert len(m["random_heads"]) < 40  # a null-looking top set stops early


def test_sequential_null_runs_on_until_every_score_decides(byte_tokenizer, tmp_path):
    # no head matters for accuracy, but the top set still lowers the choice margin: accuracy
    # decides after 2 sets, the margin goes on to the maximum, and so does the run: the
    # 15 distinct 2-head sets of one 8-head layer outside the top set (fewer than 40)
    _, m = _planted_run(byte_tokenizer, tmp_path, null=True, n_random=40, stop_at=2)
    drawn = _check_sequential(m, tmp_path / "out" / "c5" / "records.jsonl", 2, 15)
    assert drawn == [2, 15]


def test_margin_is_the_answer_minus_the_best_other_choice(tiny_c5, tiny_prompts, tmp_path):
    tiny_c5()
    answers = {r.key: r.answer_idx for r in load(tiny_prompts).records}
    seen = 0
    for r in read_records(tmp_path / "c5" / "records.jsonl"):
        if r["experiment"] == "c5" and r["task"] == "recognition":
            scores = r["metrics"]["choice_scores"]
            answer = answers[r["prompt_key"]]
            best_other = max(v for i, v in enumerate(scores) if i != answer)
            assert r["metrics"]["margin"] == pytest.approx(scores[answer] - best_other, abs=0)
            assert (r["metrics"]["margin"] > 0) == bool(r["metrics"]["score"])
            seen += 1
    assert seen


def test_resumed_sequential_run_continues_the_same_sets(byte_tokenizer, tmp_path):
    # the planted null runs blocks of 4, 8 and 16 sets (the margin decides only at the end)
    model, _, options = _planted(byte_tokenizer, tmp_path, null=True)
    options.update(n_random=16, stop_at=2, batch_size=4)
    calls = {"n": 0, "crash_at": None}
    real = c5.recognition

    def counting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == calls["crash_at"]:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    c5.recognition = counting
    try:
        whole = c5.run(model, out=tmp_path / "a", **options)
        calls.update(crash_at=calls["n"] - 1, n=0)  # the last block's next-to-last batch
        with pytest.raises(KeyboardInterrupt):
            c5.run(model, out=tmp_path / "b", **options)
    finally:
        c5.recognition = real
    m = next(iter(whole["models"].values()))
    assert len(m["random_heads"]) == 15  # every distinct 2-head set of 8 heads outside the top 2
    partial = {r["condition"] for r in read_records(tmp_path / "b" / "c5" / "records.jsonl")}
    assert "random:07" in partial and "random:14" not in partial  # stopped in the last block
    resumed = c5.run(model, out=tmp_path / "b", **options)
    strip = lambda s: json.loads(json.dumps(s))  # noqa: E731
    assert strip(resumed) == strip(whole)
    drawn = c5.draw_random_sets(1, model.n_heads, m["top_heads"], k=2, n=200, seed=3)
    assert m["random_heads"] == drawn  # one seeded order of the 15 sets


def test_typed_options_run_as_the_keywords_do(tiny_llama, tiny_prompts, tmp_path):
    from bindscope.errors import InputError

    given = {"prompts": tiny_prompts, "k": 2, "n_random": 2, "rubric": prompts_tiny.RUBRIC}
    typed = c5.run(tiny_llama, c5.C5Options(**given), out=tmp_path / "a", progress=False)
    keywords = c5.run(tiny_llama, out=tmp_path / "b", progress=False, **given)
    strip = lambda s: json.loads(json.dumps(s))  # noqa: E731
    assert strip(typed) == strip(keywords)
    with pytest.raises(InputError, match=r"\['k'\] given in the C5Options and as keywords"):
        c5.run(tiny_llama, c5.C5Options(**given), out=tmp_path / "c", k=3)


def test_every_experiment_takes_its_options_typed(tiny_llama, tiny_prompts, tmp_path):
    """``Experiment.run`` takes typed options for every study, not C5's alone."""
    from bindscope.errors import InputError
    from bindscope.experiments import binding

    options = binding.BindingOptions(prompts=tiny_prompts)
    typed = binding.run(tiny_llama, options, out=tmp_path / "a", progress=False)
    keywords = binding.run(tiny_llama, out=tmp_path / "b", progress=False, prompts=tiny_prompts)
    strip = lambda s: json.loads(json.dumps(s))  # noqa: E731
    assert strip(typed) == strip(keywords)
    with pytest.raises(InputError, match="run takes BindingOptions as its second argument"):
        binding.run(tiny_llama, c5.C5Options(), out=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_a_layer_matched_null_the_top_set_forbids_is_a_stated_limit(
    monkeypatch, tiny_llama, tiny_c5
):
    # three top heads in layer 0, which has four: one head outside them cannot match three
    monkeypatch.setattr(
        c5, "_rank", lambda *a: ([[0, 0], [0, 1], [0, 2]], [[2, 0], [2, 1], [2, 2]])
    )
    summary = tiny_c5(k=3, matched_layers=True)
    m = next(iter(summary["models"].values()))
    assert "layers" not in m["nulls"] and m["nulls"]["random"]["recognition"]["p"] is not None
    (limit,) = [f for f in summary["limits"] if f["kind"] == "null_not_drawn"]
    assert "layer 0 has 4 heads" in limit["message"] and limit["null"] == "layers"


def _clustered_records(within_term_sd: float, seed: int = 0) -> list[dict]:
    """One model's C5 records: 30 terms x 4 items; the top set's drop is a per-term effect
    plus item noise of ``within_term_sd`` (random sets drop nothing but noise)."""
    from tests.figures.synthetic import record

    rng = np.random.default_rng(seed)
    settings = {"k": 2, "n_random": 10, "ablation": "zero", "seed": 0,
                "matched_layers": False, "ranking_set": "r", "ranking_sha256": "abc"}  # fmt: skip
    items = [(f"term{t}", f"p{i}") for t in range(30) for i in range(4)]
    effect = {f"term{t}": rng.normal(0.2, 0.3) for t in range(30)}
    base = {key: rng.normal(1.0, 0.1) for key in items}
    out = []
    conditions = ["baseline", "top", *(f"random:{i:02d}" for i in range(10))]
    for name in conditions:
        for term, pid in items:
            if name == "baseline":
                margin = base[term, pid]
            elif name == "top":
                margin = base[term, pid] - effect[term] - rng.normal(0, within_term_sd)
            else:
                margin = base[term, pid] - rng.normal(0, 0.05)
            metrics = {"score": float(margin > 0.9), "margin": float(margin)}
            out.append(record("c5", "m", term, pid, name, metrics, task="recognition",
                              heads=[[0, 0], [1, 1]] if name != "baseline" else [],
                              c5=settings))  # fmt: skip
    return out


def test_term_clustered_ci_states_the_design_effect():
    from bindscope.experiments.c5_summary import summarize_c5

    def effect(within):
        summary = summarize_c5(_clustered_records(within), n_resamples=999)
        (found,) = [
            f for f in summary["limits"] if f["kind"] == "clustered" and f["score"] == "margin"
        ]
        m = summary["models"][next(iter(summary["models"]))]
        assert found["ci_terms"] == [
            m["drops"]["top_by_terms"]["margin"][k] for k in ("low", "high")
        ]
        assert found["n_terms"] == 30 and found["n_items"] == 120
        return found["design_effect"]

    # items of a term share its effect: the design effect 1 + (m - 1) * ICC nears the m = 4
    # items per term (ICC near 1); with item noise sd 1 against a term sd 0.3, ICC = 0.08
    # and it is about 1.25. A variance ratio over 30 terms varies as chi2(29) / 29 (5-95%:
    # 0.6-1.5), hence the bounds.
    assert effect(0.01) > 2.5
    assert 0.6 < effect(1.0) < 2.0


def test_a_term_interval_over_few_terms_is_said_to_be_rough():
    from bindscope.experiments.kit.limits import FEW_TERMS, term_clustering

    ci = {"low": -0.1, "high": 0.2}
    few = term_clustering("m", "margin", FEW_TERMS - 1, 40, ci, ci)["message"]
    many = term_clustering("m", "margin", FEW_TERMS, 40, ci, ci)["message"]
    assert f"with {FEW_TERMS - 1} terms the interval over terms rests on too few units" in few
    assert "too few units" not in many
