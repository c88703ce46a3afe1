"""bindscope circuit on a tiny model: records, summary, resume, refusals."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from bindscope import cli
from bindscope.errors import InputError
from bindscope.experiments import circuit
from bindscope.experiments.kit import registry
from bindscope.prompts.tasks import task_pairs
from bindscope.runners.circuit import greedy_mask, stability
from bindscope.runners.edges import edge_graph
from tests.conftest import build_tiny


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("qwen2", byte_tokenizer)


def test_run_writes_faithfulness_and_verification(model, tmp_path):
    summary = circuit.run(
        model, out=tmp_path, task="greater-than", pairs=3, edges="5,400", verify=2,
        n_random=1, progress=False,
    )  # fmt: skip
    (entry,) = summary["models"].values()
    assert entry["n_pairs"] == 3 and len(entry["edges"]) == circuit.TOP_EDGES
    small, large = entry["faithfulness"]
    n_edges = edge_graph(model).n_edges
    assert (small["n_edges"], large["n_edges"]) == (5, n_edges)  # 400 is more than there are
    # every edge kept, nothing patched: 1 up to float32 rounding over a gap of order 1
    assert large["share"] == pytest.approx(1.0, abs=1e-4)
    assert len(small["null"]) == 1 and 0 <= small["stability"] <= 1
    assert small["low"] <= small["share"] <= small["high"]
    assert entry["verify"]["k"] == 2 and len(entry["verify"]["exact"]) == 4
    lines = circuit.text(summary)
    assert any(f"top {n_edges} edges keep" in line for line in lines)
    records = (tmp_path / "circuit" / "records.jsonl").read_text().splitlines()
    again = circuit.run(
        model, out=tmp_path, task="greater-than", pairs=3, edges="5,400", verify=2,
        n_random=1, progress=False,
    )  # fmt: skip  # resumed: the model's records are there, nothing is rerun
    assert (tmp_path / "circuit" / "records.jsonl").read_text().splitlines() == records
    assert again == summary


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"edges": "5,x"}, "--edges"),
        ({"edges": "5,5,05"}, "size\\(s\\) 5 given more than once"),  # one record key per size
        ({"pairs": 1}, "--pairs"),
        ({"steps": 0}, "--steps"),
    ],
)
def test_bad_options_are_refused(model, tmp_path, options, message):
    with pytest.raises(InputError, match=message):
        circuit.run(model, out=tmp_path, task="greater-than", progress=False, **options)
    assert not (tmp_path / "circuit").exists()


@pytest.mark.parametrize("sizes", ["0", "5,5,05"])
def test_cli_refuses_bad_sizes_with_exit_2(tmp_path, capsys, sizes):
    code = cli.main(["circuit", "--edges", sizes, "--out", str(tmp_path), "--no-progress"])
    assert code == 2 and "--edges" in capsys.readouterr().err
    assert not (tmp_path / "circuit").exists()


def test_summary_is_json(model, tmp_path):
    circuit.run(model, out=tmp_path, task="greater-than", pairs=2, edges="5", n_random=0,
                progress=False)  # fmt: skip
    summary = json.loads((tmp_path / "circuit" / "summary.json").read_text())
    (entry,) = summary["models"].values()
    assert entry["faithfulness"][0]["null_mean"] is None  # no random circuits asked for


SMALL = {"task": "greater-than", "pairs": 3, "edges": "5", "verify": 1, "n_random": 1}


def _lines(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "circuit" / "records.jsonl").open()]


def _numbers(records: list[dict]) -> dict:
    """Each record's key -> its metrics (the provenance holds the time, which differs)."""
    return {r["key"]: r["metrics"] for r in records}


def test_a_half_written_model_is_refused_then_finished(model, tmp_path, capsys):
    """kill -9 during the records write: the first 3 lines are on disk (then a torn one)."""
    circuit.run(model, out=tmp_path, progress=False, **SMALL)
    path = tmp_path / "circuit" / "records.jsonl"
    full = path.read_text().splitlines(keepends=True)
    path.write_text("".join(full[:3]))  # the pairs' records, nothing of the circuit
    needle = "stopped while writing them"
    with pytest.raises(InputError, match=needle):
        circuit.summarize(tmp_path / "circuit")
    with pytest.raises(InputError, match=needle):
        registry.check_folders(tmp_path)
    for command in ("summarize", "figures", "report"):
        assert cli.main([command, str(tmp_path)]) == 2
        captured = capsys.readouterr()
        assert needle in captured.err and "keep" not in captured.out  # no numbers
    path.write_text("".join(full[:3]) + full[3][:40])  # and a line cut short
    again = circuit.run(model, out=tmp_path, progress=False, **SMALL)
    finished = _lines(tmp_path)
    assert len(finished) == len(full)  # each record once: the three on disk are not rewritten
    assert _numbers(finished) == _numbers([json.loads(line) for line in full])
    (entry,) = again["models"].values()
    assert entry["verify"] is not None and [f["n_edges"] for f in entry["faithfulness"]] == [5]


def test_seed_is_a_setting(model, tmp_path):
    """The seed draws the pairs, the random circuits and the bootstraps."""
    circuit.run(model, out=tmp_path, seed=0, progress=False, **{**SMALL, "verify": 0})
    with pytest.raises(InputError, match="seed"):
        circuit.run(model, out=tmp_path, seed=1, progress=False, **{**SMALL, "verify": 0})


def test_pair_texts_are_stored(model, tmp_path):
    circuit.run(model, out=tmp_path, progress=False, **{**SMALL, "verify": 0})
    stored = {r["prompt_key"]: r["pair"] for r in _lines(tmp_path) if r["condition"] == "clean"}
    pairs = task_pairs("greater-than", 3, model.tokenizer, seed=0)
    assert stored == {
        p.key: {"clean": p.clean, "corrupted": p.corrupted, "correct": p.correct,
                "wrong": p.wrong}
        for p in pairs
    }  # fmt: skip


def test_greedy_stability_is_the_greedy_circuits(model, tmp_path, monkeypatch):
    """Planted scores: one large edge away from the logits, the same on every pair, and
    edges into the logits whose ranks change with the pairs drawn. The top edge is stable
    (1.0), the greedy circuit's edge (into the logits) is not; the record holds the latter."""
    graph = edge_graph(model)
    logits = graph.receivers.index("logits")
    into = np.flatnonzero(graph.valid[:, logits])
    far = np.argwhere(graph.valid & (np.arange(len(graph.receivers)) != logits))[0]
    rng = np.random.default_rng(0)
    real, made = circuit.edge_attribution, []

    def planted(*args, **kwargs):
        scores = real(*args, **kwargs)
        values = np.zeros_like(scores.scores)
        values[:, into, logits] = rng.normal(0.0, 1.0, (values.shape[0], len(into)))
        values[:, far[0], far[1]] = 100.0
        made.append(replace(scores, scores=values))
        return made[-1]

    monkeypatch.setattr(circuit, "edge_attribution", planted)
    options = {**SMALL, "pairs": 6, "edges": "1", "verify": 0, "n_random": 0}
    found = circuit.run(model, out=tmp_path, selection="greedy", progress=False, **options)
    (entry,) = found["models"].values()
    (scores,) = made
    assert stability(scores, 1) == 1.0  # the plain top edge: the same in every resample
    greedy = stability(scores, 1, select=greedy_mask)
    assert greedy < 1.0  # the greedy circuit's one edge changes with the pairs drawn
    assert entry["faithfulness"][0]["stability"] == greedy
