"""bindscope circuit on a tiny model: records, summary, resume, refusals."""

from __future__ import annotations

import json

import pytest

from bindscope import cli
from bindscope.errors import InputError
from bindscope.experiments import circuit
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
    [({"edges": "5,x"}, "--edges"), ({"pairs": 1}, "--pairs"), ({"steps": 0}, "--steps")],
)
def test_bad_options_are_refused(model, tmp_path, options, message):
    with pytest.raises(InputError, match=message):
        circuit.run(model, out=tmp_path, task="greater-than", progress=False, **options)
    assert not (tmp_path / "circuit").exists()


def test_cli_refuses_bad_sizes_with_exit_2(tmp_path, capsys):
    code = cli.main(["circuit", "--edges", "0", "--out", str(tmp_path), "--no-progress"])
    assert code == 2 and "--edges" in capsys.readouterr().err
    assert not (tmp_path / "circuit").exists()


def test_summary_is_json(model, tmp_path):
    circuit.run(model, out=tmp_path, task="greater-than", pairs=2, edges="5", n_random=0,
                progress=False)  # fmt: skip
    summary = json.loads((tmp_path / "circuit" / "summary.json").read_text())
    (entry,) = summary["models"].values()
    assert entry["faithfulness"][0]["null_mean"] is None  # no random circuits asked for
