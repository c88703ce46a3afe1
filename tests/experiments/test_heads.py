"""``bindscope heads`` and ``bindscope sweep --heads`` end to end on tiny models."""

from __future__ import annotations

import json

import pytest

from bindscope.experiments import heads, sweep
from bindscope.experiments.kit.registry import validate_file
from bindscope.figures import make_figures, write_report
from bindscope.metrics import taxonomy
from tests.conftest import build_tiny
from tests.experiments import prompts_tiny

SMALL = {"n_repeated": 4, "repeat_length": 6}


def _lines(path) -> list[str]:
    return path.read_text("utf-8").splitlines()


def test_heads_run_validates_resumes_and_draws(tiny_llama, tiny_prompts, tmp_path):
    summary = heads.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False, **SMALL)
    path = tmp_path / "heads" / "records.jsonl"
    n = validate_file(path)
    assert n == len(prompts_tiny.records()) + SMALL["n_repeated"]
    entry = summary["models"][f"{tiny_llama.name}@main"]
    assert entry["position_0_is_bos"] is True  # the SentencePiece tokenizer adds BOS
    for score in taxonomy.SCORES:
        est = entry["scores"][score]
        assert len(est["value"]) == tiny_llama.n_layers
        assert all(
            lo <= v <= hi for lo, v, hi in zip(est["low"][0], est["value"][0], est["high"][0])
        )
    assert entry["scores"]["induction"]["n"] == SMALL["n_repeated"]
    assert sum(entry["binding_top_overlap"].values()) >= entry["top_k"]
    assert (
        sum(entry["classes"]["primary_counts"].values()) == tiny_llama.n_layers * tiny_llama.n_heads
    )
    # the repeated records carry the seeded tokens; a rerun computes nothing new
    repeated = [json.loads(x) for x in _lines(path) if '"repeated"' in x]
    assert all(len(r["metrics"]["tokens"]) == SMALL["repeat_length"] for r in repeated)
    before = _lines(path)
    heads.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False, **SMALL)
    assert _lines(path) == before
    report = make_figures(tmp_path)
    names = [f.name for f in report.figures]
    assert any(name.startswith("heads_map_") for name in names), report.skipped
    text = write_report(tmp_path, figures=report).read_text("utf-8")
    assert "Head taxonomy" in text and "position 0 is BOS" in text


def test_thresholds_and_top_k_change_only_the_summary(tiny_llama, tiny_prompts, tmp_path):
    heads.run(tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False, **SMALL)
    folder = tmp_path / "heads"
    before = _lines(folder / "records.jsonl")
    again = heads.summarize(folder, thresholds={"sink": 0.0}, top_k=2)
    entry = next(iter(again["models"].values()))
    assert entry["classes"]["counts"]["sink"] == tiny_llama.n_layers * tiny_llama.n_heads
    assert len(entry["binding_top"]) == 2 and entry["binding_top_overlap"]["sink"] == 2
    assert _lines(folder / "records.jsonl") == before
    with pytest.raises(Exception, match="no head class"):
        heads.run(
            tiny_llama, prompts=tiny_prompts, out=tmp_path, progress=False,
            thresholds={"sinks": 0.5}, **SMALL,
        )  # fmt: skip


def test_sweep_heads_emergence_resumes_and_validates(sp_tokenizer, tiny_prompts, tmp_path):
    loads: list[str] = []
    revisions = ["step1000-tokens4B", "step2000-tokens8B", "step3000-tokens12B"]
    fail = {"step3000-tokens12B"}

    def loader(name, *, revision):
        if revision in fail:
            fail.discard(revision)
            raise KeyboardInterrupt  # the run is cut off while loading the last checkpoint
        loads.append(revision)
        model = build_tiny("llama", sp_tokenizer)
        model.revision = revision
        return model

    options = {
        "prompts": tiny_prompts,
        "out": tmp_path,
        "loader": loader,
        "rubric": prompts_tiny.RUBRIC,
        "progress": False,
        "heads": True,
        **SMALL,
    }
    with pytest.raises(KeyboardInterrupt):
        sweep.run("fake/model", revisions, **options)
    assert loads == revisions[:2]
    sweep.run("fake/model", revisions, **options)
    assert loads == revisions  # only the unfinished checkpoint was loaded again
    path = tmp_path / "heads" / "records.jsonl"
    per_revision = len(prompts_tiny.records()) + SMALL["n_repeated"]
    assert validate_file(path) == per_revision * len(revisions)
    summary = heads.summarize(tmp_path / "heads", thresholds={"sink": 0.0, "induction": 2.0})
    em = summary["emergence"]["fake/model"]
    assert em["revisions"] == revisions
    assert em["tokens"] == [4 * 10**9, 8 * 10**9, 12 * 10**9]
    assert em["first"]["sink"]["revision"] == revisions[0]  # threshold 0: every head at once
    assert em["first"]["induction"] is None  # threshold 2 is out of reach
    assert em["induction_lead_tokens"] is None
    assert all(len(v) == len(revisions) for v in em["fraction"].values())
    assert len(em["trajectories"]["induction"]["heads"]) == 4
    report = make_figures(tmp_path)
    assert any(f.name.startswith("heads_emergence_") for f in report.figures), report.skipped
    text = write_report(tmp_path, figures=report).read_text("utf-8")
    assert "first checkpoint where each class crosses its threshold" in text


def test_emergence_first_crossing_and_induction_lead():
    def grid(value):
        return [[value, 0.0], [0.0, 0.0]]

    means = [
        {"sink": grid(0.1), "induction": grid(0.1)},
        {"sink": grid(0.2), "induction": grid(0.5)},
        {"sink": grid(0.9), "induction": grid(0.6)},
    ]
    revisions = ["step1000", "step2000", "step3000"]
    em = taxonomy.emergence(revisions, means, model="EleutherAI/pythia-160m")
    assert em["first"]["induction"]["revision"] == "step2000"
    assert em["first"]["sink"]["revision"] == "step3000"
    step = taxonomy.PYTHIA_TOKENS_PER_STEP
    assert step == 2_097_152
    assert em["induction_lead_tokens"] == 1000 * step
    assert em["fraction"]["sink"] == [0.0, 0.0, 0.25]
    # no token counts in the names of another model: no lead in tokens
    other = taxonomy.emergence(revisions, means, model="org/other")
    assert other["tokens"] == [None] * 3 and other["induction_lead_tokens"] is None


def test_revision_tokens():
    assert taxonomy.revision_tokens("allenai/OLMo-1B-hf", "step1000-tokens4B") == 4 * 10**9
    assert taxonomy.revision_tokens("EleutherAI/pythia-1b", "step143000") == 143000 * 2097152
    assert taxonomy.revision_tokens("stanford-crfm/x", "checkpoint-5000") is None
    assert taxonomy.revision_tokens("m", None) is None
