"""Every benchmark still runs against today's package, on a tiny random model.

The benchmarks time bindscope's functions where the package calls them (some by replacing a
module attribute), so a restructuring can break one without any other test noticing: after
issue 29's trimming, ``bench_c5.py`` failed on a name C5 no longer held. Each benchmark runs
here at its smallest size on a tiny Llama and must finish with exit 0. The numbers are not
checked: on random weights they mean nothing, and the timings belong to a quiet machine.
``bench_remote.py`` needs a running NDIF server and is left to the live layer's own tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import c5_frontier
from bindscope import demo
from tests.conftest import build_tiny

ROOT = Path(__file__).resolve().parents[1]

#: Each benchmark with the arguments of its smallest run (``{model}``: the tiny model's folder).
RUNS = {
    "binding": ["--quick", "--model", "{model}"],
    "c5": ["--quick", "--model", "{model}"],
    "c5_start": ["--model", "{model}", "--items", "4", "--sets", "2", "--rounds", "2"],
    "scan": ["--tiny", "--limit", "4", "--verify", "2"],
    "scan_attribution": ["--tiny", "--limit", "4", "--verify", "2", "--attribution"],
    "patching_sweep": ["--tiny", "--quick"],
    "circuit": [
        "--model",
        "{model}",
        "--tasks",
        "greater-than",
        "--pairs",
        "4",
        "--sizes",
        "2",
        "--verify",
        "2",
        "--steps",
        "2",
    ],
}


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, byte_tokenizer) -> Path:
    """A tiny Llama saved as a model folder, as ``--model`` takes it."""
    folder = tmp_path_factory.mktemp("bench-model")
    build_tiny("llama", byte_tokenizer).hf.save_pretrained(folder)
    byte_tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_benchmark_runs_on_a_tiny_model(name: str, model_folder: Path, tmp_path: Path) -> None:
    script = "bench_scan.py" if name == "scan_attribution" else f"bench_{name}.py"
    args = [a.format(model=model_folder) for a in RUNS[name]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"bench_{name} exited {done.returncode}:\n{done.stderr[-3000:]}"


def test_the_c5_frontier_runs_on_a_synthetic_summary(tmp_path: Path) -> None:
    """The frontier script reads a C5 summary's spreads and prints its picks; no model."""
    summary = {
        "models": {
            "SmolLM2-135M-Instruct@main": {
                "random_drops": {"recognition": [0.0, 0.05, -0.02]},
                "n_items": {"recognition": 10},
                "paired_sd": {"recognition": 0.4},
            }
        }
    }
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    figure = tmp_path / "frontier.png"
    script = ROOT / "benchmarks" / "c5_frontier.py"
    args = ["--summary", str(path), "--figure", str(figure)]
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fits 15 min for three models" in done.stdout and figure.is_file()
    assert "powered preset (bindscope c5 --preset powered)" in done.stdout


def test_the_powered_preset_is_the_frontiers_cheapest_design_reaching_0_005() -> None:
    """All items, both nulls, p to 0.005: the tail p's fewest calibrated sets, not 199."""
    from bindscope.experiments.c5_presets import POWERED_N_RANDOM
    from bindscope.metrics.stats.frontier import TAIL_CALIBRATED_SETS

    rows = c5_frontier.frontier(c5_frontier.spreads_from([]))
    chosen = c5_frontier.powered(rows)
    assert (chosen["items"], chosen["nulls"]) == (205, "random+layers")
    assert chosen["N"] == POWERED_N_RANDOM == TAIL_CALIBRATED_SETS and chosen["p"] == "tail"
    exact = min(r["minutes"] for r in rows if r["reaches"] and r["p"] == "exact"
                and r["items"] == 205 and r["nulls"] == "random+layers")  # fmt: skip
    assert chosen["minutes"] < exact


def test_the_demo_runs_the_frontiers_fifteen_minute_design() -> None:
    """demo.py's C5 constants are the point the frontier picks from its recorded inputs."""
    chosen = c5_frontier.pick(c5_frontier.frontier(c5_frontier.spreads_from([])), 15.0)
    assert chosen is not None
    assert chosen["per_term"] == len(demo.DEMO_C5_IDS) and chosen["N"] == demo.DEMO_N_RANDOM
    assert chosen["nulls"] == "random"
