"""Checkpoint sweep end to end (fake checkpoints = tiny models), lead-lag and decoupling."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
from scipy import stats as sps

from bindscope.errors import InputError
from bindscope.experiments import sweep
from bindscope.experiments.kit.registry import validate_file
from tests.conftest import build_tiny
from tests.experiments import prompts_tiny


def test_presets_and_revision_lists():
    assert sweep.resolve_revisions("pythia-paper")[0] == "step0"
    assert len(sweep.resolve_revisions("olmo-1b")) == 8
    assert sweep.resolve_revisions("crfm")[-1] == "checkpoint-400000"
    assert sweep.resolve_revisions("a, b ,c") == ["a", "b", "c"]
    with pytest.raises(InputError, match="twice"):
        sweep.resolve_revisions("a,a")
    with pytest.raises(InputError, match="preset"):
        sweep.resolve_revisions("")


def test_sweep_runs_each_revision_once_and_resumes(sp_tokenizer, tiny_prompts, tmp_path):
    loads = []

    def loader(name, *, revision):
        loads.append(revision)
        model = build_tiny("llama", sp_tokenizer)
        model.revision = revision  # a fake checkpoint: these weights stand for that revision
        return model

    revisions = ["r0", "r1", "r2", "r3"]
    options = {
        "prompts": tiny_prompts,
        "out": tmp_path,
        "loader": loader,
        "rubric": prompts_tiny.RUBRIC,
    }
    summary = sweep.run("fake/model", revisions, progress=False, **options)
    assert loads == revisions
    n = validate_file(tmp_path / "sweep" / "records.jsonl")
    assert n == len(prompts_tiny.records()) * len(revisions)
    m = summary["models"]["fake/model"]
    assert m["revisions"] == revisions
    assert len(m["eb_star"]) == 4 and all(e["n"] == len(prompts_tiny.TERMS) for e in m["eb_star"])
    # same weights at every "revision": the series are flat, so lead-lag has nothing to test
    assert m["leadlag"].get("n_terms", 0) == 0
    sweep.run("fake/model", revisions, progress=False, **options)
    assert loads == revisions  # nothing reloaded
    sweep.run("fake/model", [*revisions, "r4"], progress=False, **options)
    assert loads == [*revisions, "r4"]


def test_revisions_load_lazily_one_at_a_time_for_every_folder(sp_tokenizer, tiny_prompts, tmp_path):
    """Each revision is loaded only while a folder lacks its records, the last one freed first.

    ``sweep --heads`` writes ``OUT/heads`` from the same loaded revisions (one skeleton,
    two folders): a revision whose sweep records exist is loaded again for its heads.
    """
    loads, alive = [], []

    def loader(name, *, revision):
        gc.collect()
        assert not [r for r in alive if r() is not None], "the previous revision is still held"
        loads.append(revision)
        model = build_tiny("llama", sp_tokenizer)
        model.revision = revision
        alive.append(weakref.ref(model))
        return model

    revisions = ["r0", "r1"]
    options = {"prompts": tiny_prompts, "out": tmp_path, "loader": loader, "progress": False}
    options |= {"rubric": prompts_tiny.RUBRIC, "n_repeated": 2, "repeat_length": 4}
    sweep.run("fake/model", revisions, **options)
    assert loads == revisions
    sweep.run("fake/model", revisions, heads=True, **options)
    assert loads == revisions * 2  # the heads folder lacked every revision
    assert validate_file(tmp_path / "heads" / "records.jsonl") > 0
    assert (tmp_path / "heads" / "summary.json").is_file()
    sweep.run("fake/model", revisions, heads=True, **options)
    assert loads == revisions * 2  # both folders complete: nothing loaded


def _records(series: dict[str, tuple[list[float], list[float]]]) -> list[dict]:
    """Synthetic sweep records: one prompt per term and revision."""
    out = []
    revisions = [f"s{i}" for i in range(len(next(iter(series.values()))[0]))]
    for term, (eb, beh) in series.items():
        for rev, e, b in zip(revisions, eb, beh):
            out.append(
                {
                    "experiment": "sweep",
                    "model": "m",
                    "revision": rev,
                    "term": term,
                    "metrics": {"eb_star": e, "behaviour": b},
                    "provenance": {"sweep": {"revisions": revisions}},
                }
            )
    return out


def test_leadlag_detects_binding_leading_behaviour():
    rng = np.random.default_rng(0)
    series = {}
    for t in range(12):
        eb = np.cumsum(rng.random(8))
        beh = np.r_[0.0, eb[:-1]] + 0.01 * rng.random(8)  # behaviour follows EB* one step later
        series[f"term{t}"] = (eb.tolist(), beh.tolist())
    s = sweep.summarize_sweep(_records(series))["models"]["m"]
    ll = s["leadlag"]
    assert ll["n_terms"] == 12
    assert ll["n_lead"]["pearson"] >= 10
    assert ll["binomial"]["pearson"]["p_value"] < 0.05
    assert ll["lead_fraction"]["pearson"]["low"] > 0.5
    eb, beh = series["term0"]
    fwd = sps.pearsonr(eb[:-1], beh[1:]).statistic
    bwd = sps.pearsonr(beh[:-1], eb[1:]).statistic
    assert ll["per_term"]["term0"]["pearson"]["forward"] == pytest.approx(fwd)
    assert ll["per_term"]["term0"]["pearson"]["lead_diff"] == pytest.approx(fwd - bwd)
    rho = sps.spearmanr(eb[:-1], beh[1:]).statistic
    assert ll["per_term"]["term0"]["spearman"]["forward"] == pytest.approx(rho)


def test_decoupling_counts_sign_changes():
    up = [0.1, 0.2, 0.3, 0.4]
    series = {
        "coupled": ([*up, 0.5, 0.6, 0.7, 0.8], [*up, 0.5, 0.6, 0.7, 0.8]),
        "decoupled": ([*up, 0.5, 0.6, 0.7, 0.8], [*up, 0.8, 0.7, 0.6, 0.5]),
    }
    dc = sweep.summarize_sweep(_records(series))["models"]["m"]["decoupling"]
    assert dc["split"] == 4 and dc["n_terms"] == 2
    assert dc["per_term"]["decoupled"] == {"early": pytest.approx(1.0), "late": pytest.approx(-1.0)}
    assert dc["n_strict"] == 1 and dc["n_attenuate"] == 1
    assert dc["mean_late"] == pytest.approx(0.0)


def test_short_sweeps_say_why_analyses_are_skipped():
    series = {"t": ([0.1, 0.2, 0.3], [0.3, 0.1, 0.2])}
    summary = sweep.summarize_sweep(_records(series))
    m = summary["models"]["m"]
    assert "4+ revisions" in m["leadlag"]["skipped"]
    assert "3+ revisions" in m["decoupling"]["skipped"]
    assert not math.isnan(m["eb_star"][0]["value"])
    # the summary's limits say so too, for the report and the terminal
    said = {f["group"]: f["message"] for f in summary["limits"] if f["kind"] == "small_group"}
    assert "4+ revisions" in said["lead-lag"] and "3+ revisions" in said["decoupling"]
