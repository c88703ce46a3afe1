"""Binding, recognition and every experiment through the real NDIF server equal local runs.

The runners are called directly on both embedded models; the experiments (C5, the
attribution scan, patch, heads, the exact scan) run from the CLI with ``--remote`` against
the local server on one model, as a user runs them, and their summaries must equal the local
CLI's (each local run once per session). Options keep each run small (``--limit``,
``--unit layer``, two random sets) so the layer stays quick.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import bindscope
from bindscope.cli import main
from bindscope.loading import SERVED
from bindscope.prompts import PromptRecord
from bindscope.remote import transport
from bindscope.remote.transport import host
from bindscope.runners.behaviour import recognition
from bindscope.runners.binding import binding
from bindscope.runners.scan import ScoredSequence, condition_scores
from tests.experiments import prompts_tiny
from tests.remote.live.conftest import BOTH_MODES
from tests.remote.live.test_calls import HEADS, TEXTS
from tests.tolerance import gradient_bound, logit_bound

pytestmark = pytest.mark.ndif_live

RECORDS = [
    PromptRecord(
        "gen_001", "screen reader", "generation", "In web accessibility, a screen reader is"
    ),
    PromptRecord(
        "gen_002", "color contrast", "generation", "Developers should test color contrast and"
    ),
]
CHOICES = [
    PromptRecord(
        "rec_001",
        "alt text",
        "recognition",
        "Alt text describes an image for: A) people B) dogs",
        choices=["people", "dogs"],
        answer_idx=0,
    ),
    PromptRecord(
        "rec_002",
        "skip link",
        "recognition",
        "True or False: a skip link helps keyboard users.",
        choices=["True", "False"],
        answer_idx=0,
    ),
]


def test_eb_star_equals_local(twins):
    local, far = twins
    for kwargs in ({}, {"ablate": HEADS}):
        for got, ref in zip(binding(far, RECORDS, **kwargs), binding(local, RECORDS, **kwargs)):
            assert got.eb_star == ref.eb_star or (
                math.isnan(got.eb_star) and math.isnan(ref.eb_star)
            )
            assert torch.equal(got.bsi.nan_to_num(-1), ref.bsi.nan_to_num(-1))


def test_recognition_equals_local(twins):
    local, far = twins
    for kwargs in ({}, {"ablate": HEADS}):
        got = recognition(far, CHOICES, **kwargs)
        full = recognition(local, CHOICES, strategy="full", **kwargs)
        shared = recognition(local, CHOICES, **kwargs)
        # remotely each prompt+choice is scored in full (a shared KV cache would cross the
        # network twice): bit-equal to the local full strategy ...
        assert [r.to_dict() for r in got] == [r.to_dict() for r in full]
        # ... and within float noise of the local shared-prefix one: a log-softmax moves by at
        # most twice its logits' rounding bound
        bound = 2 * logit_bound(local, [r.template for r in CHOICES])
        for g, s in zip(got, shared):
            assert g.scores == pytest.approx(s.scores, abs=bound)


def _prompts(folder: Path) -> Path:
    """Ten records (two terms) of the small prompt set, as a prompt file."""
    path = folder / "prompts.jsonl"
    rows = [r for r in prompts_tiny.records() if r["term"] in ("screen reader", "skip link")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _assert_close(got, ref, bound: float, where: str = "summary") -> None:
    """Equal structure and text; numbers within ``bound``."""
    if isinstance(ref, dict):
        assert got.keys() == ref.keys(), where
        for key in ref:
            _assert_close(got[key], ref[key], bound, f"{where}.{key}")
    elif isinstance(ref, list):
        assert len(got) == len(ref), where
        for i, (g, r) in enumerate(zip(got, ref)):
            _assert_close(g, r, bound, f"{where}[{i}]")
    elif isinstance(ref, float) and not isinstance(ref, bool):
        assert got == pytest.approx(ref, abs=bound, nan_ok=True), where
    else:
        assert got == ref, where


def _summary(folder: Path, experiment: str, name: str) -> dict:
    """The summary with the model's name spelled one way (a Hub id remotely)."""
    text = (folder / experiment / "summary.json").read_text()
    for short, repo in SERVED.items():
        text = text.replace(repo, short)
    summary = json.loads(text)
    summary.pop("created", None)
    return summary


EXPERIMENTS = {
    "c5": ["--k", "2", "--n-random", "2"],
    "scan-attribution": [
        "--method",
        "attribution",
        "--verify",
        "1",
        "--limit",
        "2",
        "--n-resamples",
        "50",
    ],
    "patch": ["--unit", "layer", "--limit", "2", "--n-resamples", "50"],
    "heads": ["--n-repeated", "2"],
}
# The CLI's comparisons run on one model: what the CLI adds (options, records, resume,
# provenance) does not depend on the model; the runners' calls run on both (above and
# test_calls.py).
CLI_MODEL = "SmolLM2-135M-Instruct"
_LOCAL_RUNS: dict[tuple[str, ...], Path] = {}


def _cli(command: list[str], folder: Path) -> tuple[list[str], str]:
    """The CLI's arguments for ``command`` (prompt file in ``folder``) and the results' folder."""
    name, *options = command
    if name in ("c5", "heads"):
        options = [*options, "--prompts", str(_prompts(folder))]
    return [name, *options, "--no-progress"], name if name != "patch" else "patching"


@pytest.fixture(scope="session")
def local_run(tmp_path_factory):
    """The local CLI's results for a command, run once per session and shared by the modes."""

    def run(command: list[str]) -> Path:
        key = tuple(command)
        if key not in _LOCAL_RUNS:
            folder = tmp_path_factory.mktemp("local")
            common, _ = _cli(command, folder)
            assert main([*common, "--model", CLI_MODEL, "--out", str(folder / "out")]) == 0
            _LOCAL_RUNS[key] = folder / "out"
        return _LOCAL_RUNS[key]

    return run


def _remote_equals_local(command, local_run, tmp_path, capsys):
    """Run ``command`` remotely; its summary and the local one's (equal is up to the caller)."""
    common, folder = _cli(command, tmp_path)
    ref = _summary(local_run(command), folder, CLI_MODEL)
    far = [*common, "--model", SERVED[CLI_MODEL], "--remote", "--out", str(tmp_path / "far")]
    assert main(far) == 0
    capsys.readouterr()
    records = (tmp_path / "far" / folder / "records.jsonl").read_text().splitlines()
    provenance = json.loads(records[0])["provenance"]
    assert provenance["remote"] == "ndif" and provenance["ndif_host"] == host()
    return _summary(tmp_path / "far", folder, CLI_MODEL), ref


@pytest.mark.parametrize("experiment", ["c5", "patch", "heads"])
def test_experiment_from_the_cli_equals_local(experiment, live, local_run, tmp_path, capsys):
    got, ref = _remote_equals_local(
        [experiment, *EXPERIMENTS[experiment]], local_run, tmp_path, capsys
    )
    if experiment == "c5":
        # accuracy is 0/1 and exact; the choice margin is not: remotely each prompt+choice is
        # scored in full, locally the prompt's cache is shared, so a choice score is within
        # twice the logit bound (tests/remote/test_simulation.py), a margin (two scores) within
        # 4x, a drop of mean margins and its CI ends within 8x. A p-value or a set count that
        # moved would still fail: they move in steps of 1/(sets + 1), far above this bound.
        _assert_close(got, ref, 8 * logit_bound(bindscope.load_model(CLI_MODEL), TEXTS))
    else:
        assert got == ref


def test_the_attribution_scan_from_the_cli_equals_local_or_is_refused(
    mode, local_run, tmp_path, capsys
):
    """Trusted: the same summary. Sandboxed: the gradients cannot reach the model's process,
    so a clear error and no numbers."""
    command = ["scan", *EXPERIMENTS["scan-attribution"]]
    if mode == "sandboxed":
        common, folder = _cli(command, tmp_path)
        far = [*common, "--model", SERVED[CLI_MODEL], "--remote", "--out", str(tmp_path / "far")]
        assert main(far) != 0
        assert "did not reach layer 0's input" in capsys.readouterr().err
        assert not (tmp_path / "far" / folder / "summary.json").exists()
        return
    got, ref = _remote_equals_local(command, local_run, tmp_path, capsys)
    # estimates: frozen server weights, other backward kernels (tests/tolerance.py
    # gradient_bound); verified effects: Model.logits remotely, the residual-start runner
    # locally, each mean log-prob within twice the logit bound, an effect within 4x
    local = bindscope.load_model(CLI_MODEL)
    estimates = torch.tensor(ref["models"][f"{CLI_MODEL}@main"]["metrics"]["logprob"]["estimate"])
    bound = max(gradient_bound(local, estimates), 4 * logit_bound(local, TEXTS))
    _assert_close(got, ref, bound)


@pytest.mark.parametrize("ablation", ["mean"])
def test_the_exact_scan_from_the_cli_equals_local(ablation, live, local_run, tmp_path, capsys):
    """The exact scan, each batch one session on the server: the same summary. Mean
    ablation, the one whose means travel with the request; zero and resample ablations
    through the same sessions: the runner test below, on both models."""
    options = ["--unit", "layer", "--limit", "2", "--n-resamples", "50", "--ablation", ablation]
    got, ref = _remote_equals_local(["scan", *options], local_run, tmp_path, capsys)
    # a score is within twice the logit bound of local (test below), an effect (two scores)
    # within 4x, a difference of two mean effects or a CI end of one within 8x; a p-value or
    # count that moved would still fail (steps of 1/(resamples + 1), far above the bound)
    _assert_close(got, ref, 8 * logit_bound(bindscope.load_model(CLI_MODEL), TEXTS))
    records = [json.loads(line) for line in (tmp_path / "far" / "scan" / "records.jsonl").open()]
    # negative control: ablations change the scores, so equal summaries say something
    first = records[0]["prompt_key"]
    scores = {r["condition"]: r["metrics"]["logprob"] for r in records if r["prompt_key"] == first}
    assert len(set(scores.values())) > 1, scores


@contextlib.contextmanager
def _frozen(model):
    """The model's weights frozen for the block, as NDIF's model actor freezes them."""
    trainable = [p for p in model.hf.parameters() if p.requires_grad]
    for p in trainable:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p in trainable:
            p.requires_grad_(True)


@BOTH_MODES
def test_the_exact_scan_runner_equals_local_in_one_request_per_batch(twins, mode, monkeypatch):
    """One session per batch, trusted and sandboxed (no ``tracer.stop()`` there: Limits)."""
    local, far = twins
    sent = []
    original = transport._send
    monkeypatch.setattr(transport, "_send", lambda m, t: sent.append(1) or original(m, t))
    sequences = [
        ScoredSequence(local.tokenize(text), 2)
        for text in [*TEXTS, "Captions help deaf users follow a video."]
    ]
    conditions = [[(0, 1)], [(1, 0)], [(local.n_layers - 1, 2)], [(2, h) for h in range(3)]]
    donors = sequences[1:] + sequences[:1]
    for kwargs in ({}, {"donors": donors}):
        got = condition_scores(far, sequences, conditions, batch_size=2, **kwargs)
        # The server freezes its weights; torch's matmul takes another path for the
        # unembedding of the kept positions (a strided [b, T + 1, d]) when the weight requires
        # grad (measured: 3e-5 on the logits, 5e-6 on a score). Frozen here too: the same bits.
        with _frozen(local):
            want = condition_scores(local, sequences, conditions, batch_size=2, **kwargs)
        assert np.array_equal(got[0], want[0]), np.abs(got[0] - want[0]).max()
        assert np.array_equal(got[1], want[1]), np.abs(got[1] - want[1]).max()
        # negative control: the ablations move the scores by far more than the logit bound
        assert np.abs(got[1] - got[0][None]).max() > 10 * 2 * logit_bound(local, TEXTS)
    assert len(sent) == 2 * -(-len(sequences) // 2)  # one session per batch
