"""The demo end to end on a tiny model (quick mode), and the CLI around its results."""

from __future__ import annotations

import json

import pytest

from bindscope import cli, demo
from bindscope.experiments.kit.registry import validate_file


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory, sp_tokenizer):
    from tests.conftest import build_tiny

    out = tmp_path_factory.mktemp("demo")
    # the demo's three architectures: Llama (SmolLM2), Gemma 3 and Qwen2 (Qwen2.5-Coder)
    three = [build_tiny(f, sp_tokenizer) for f in ("llama", "gemma3", "qwen2")]
    demo.run(out=out, quick=True, progress=False, models=three, force=True)
    return out


def test_demo_writes_records_summaries_figures_and_report(demo_dir, capsys):
    for name in ("binding", "c5", "controls", "fewshot"):
        assert validate_file(demo_dir / name / "records.jsonl") > 0
        summary = json.loads((demo_dir / name / "summary.json").read_text())
        assert summary["experiment"] == name and len(summary["models"]) == 3
    c5 = json.loads((demo_dir / "c5" / "summary.json").read_text())
    # up to 59 sets: p can reach 1/60, x 3 models under Holm 0.05 (the frontier's 15-minute point)
    assert c5["k"] == 4 and c5["n_random"] == 59 and c5["ablation"] == "zero"
    assert c5["sampling"] == "sequential" and c5["stop_at"] == 10
    assert not [f for f in c5["limits"] if f["kind"] in ("p_resolution", "undecided")]
    assert len(c5["models"]) == 3  # all models side by side (force discarded nothing)
    for m in c5["models"].values():
        assert "generation" not in m["conditions"]["baseline"]  # at the floor: left out
        assert set(m["nulls"]) == {"random"}  # the frontier's point: the random null only
        test = m["nulls"]["random"]["recognition"]
        assert test["p"] is not None and test["p_holm"] >= test["p"]
        assert 1 <= test["n_drawn"] <= 59 and test["stopped"] in ("reached", "maximum")
        assert m["detectable_drop"]["recognition"] is not None
    assert "recognition only" in c5["design"]
    assert "recognition only" in (demo_dir / "report.md").read_text()
    stops = (demo_dir / "report.md").read_text().split("## Where the demo's power stops")[-1]
    for label in c5["models"]:  # each model's detectable drop, and the command beyond it
        assert f"- {label}: detectable recognition drop " in stops
    assert "`make c5-powered`" in stops
    assert c5["ranking_set"] == "canonical-quick"
    assert (demo_dir / "report.md").stat().st_size > 1000
    assert len(list((demo_dir / "figures").glob("*.png"))) >= 4
    assert (demo_dir / "figures" / "c5_cross_architecture.png").is_file()
    report = (demo_dir / "report.md").read_text()
    # heads per set stated per model: 4 of 3 x 4 = 12 heads on both tiny models
    assert report.count("| 4 of 12 (33.3%) |") == 3
    assert "| 3 x 4 = 12 | not stated |" in report  # tiny models: no training stated


def test_summarize_recomputes_the_same_summaries(demo_dir, capsys):
    before = {n: (demo_dir / n / "summary.json").read_text() for n in ("c5", "controls")}
    for n in before:
        (demo_dir / n / "summary.json").unlink()
    assert cli.main(["summarize", str(demo_dir)]) == 0
    for n, text in before.items():
        assert json.loads((demo_dir / n / "summary.json").read_text()) == json.loads(text)
    assert "C5 head ablation" in capsys.readouterr().out


def test_cli_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    assert cli.main(["summarize", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no experiment results here" in err and "Traceback" not in err
    bad = tmp_path / "c5"
    bad.mkdir()
    (bad / "records.jsonl").write_text('{"schema": "bindscope.result/1"}\n{oops\n')
    assert cli.main(["summarize", str(tmp_path)]) == 2
    assert "records.jsonl:1" in capsys.readouterr().err


def test_cli_parses_every_command():
    p = cli.parser()
    args = p.parse_args(["c5", "--model", "a", "--model", "b@step1", "--out", "x", "--k", "2"])
    assert args.model == ["a", "b@step1"] and args.k == 2 and args.n_random == 199
    assert args.sampling == "sequential" and args.stop_at == 10
    args = p.parse_args(["sweep", "--model", "m", "--revisions", "pythia-paper", "--out", "x"])
    assert args.revisions == "pythia-paper"
    for command in ("binding", "fewshot", "controls"):
        assert p.parse_args([command, "--out", "x"]).func.__name__ == f"cmd_{command}"
    assert p.parse_args(["audit", "--prompts", "controls"]).prompts == "controls"
    assert p.parse_args(["demo"]).out.name == "bindscope-demo"


def test_audit_flags_missing_and_single_token_spans(tiny_llama):
    from bindscope.prompts import PromptRecord
    from bindscope.prompts.audit import audit, format_audit

    records = [
        PromptRecord("gen_001", "screen reader", "generation", "A screen reader is", max_tokens=3),
        PromptRecord("gen_002", "screen reader", "generation", "Nothing here", max_tokens=3),
        PromptRecord("gen_003", "a", "generation", "a b c", max_tokens=3),
    ]
    rows = audit(tiny_llama, records)
    assert rows[0]["n_span"] >= 2 and "not_found" not in rows[0]["flags"]
    assert rows[1]["flags"] == ["not_found"] and "gen_002" in rows[1]["reason"]
    assert "single_token" in rows[2]["flags"]
    lines = format_audit(rows)
    assert lines[1].startswith("!") and lines[2].startswith("!")


def test_demo_runs_three_architectures_and_refuses_a_model_it_cannot_load(monkeypatch, tmp_path):
    from bindscope import loading
    from bindscope.errors import InputError

    assert demo.DEMO_MODELS == (None, "gemma-3-270m", "qwen2.5-coder-0.5b")
    # an install whose loader lacks the Qwen row: refused before any model loads
    real = loading.embedded
    monkeypatch.setattr(
        loading, "embedded", lambda name: None if name == "qwen2.5-coder-0.5b" else real(name)
    )
    monkeypatch.setattr(loading, "check_embedded", lambda name: None)
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(InputError, match=r"'qwen2\.5-coder-0\.5b' is not an embedded model"):
        demo.run(out=tmp_path / "demo", progress=False)
    assert not (tmp_path / "demo").exists()


def test_the_power_statement_names_each_models_detectable_drop_and_the_powered_command():
    """On a synthetic summary: the drop and its excess over the random mean, per model."""
    summary = {
        "n_random": 59,
        "models": {
            "A": {"detectable_drop": {"recognition": 0.25},
                  "random_drops": {"recognition": [0.0, 0.1]},
                  "nulls": {"random": {}}},
            "B": {"detectable_drop": {}, "random_drops": {}, "nulls": {"random": {}}},
        },
    }  # fmt: skip
    text = demo.power_statement(summary)
    assert "- A: detectable recognition drop 0.250 (0.200 above the random sets' mean" in text
    assert "- B: detectable recognition drop not computed" in text
    assert "59 sets per null at most" in text and "`make c5-powered`" in text
