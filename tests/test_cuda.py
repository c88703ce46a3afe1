"""bindscope on a CUDA GPU gives what it gives on the CPU, on every family (``-m cuda``).

Each family's tiny model is written to a folder once and loaded from it twice through
bindscope's own device path (``load_model(folder, device="cuda")``, what ``--device cuda``
does), once on the CPU and once on the GPU; every call below then runs on both and must
agree within rounding, and come back as CPU tensors or arrays as on the CPU.

Bounds: the two devices run the same float32 arithmetic through other kernels (other matmul
tilings, tree reductions, their own ``exp``), so the same computation summed in another
order: rounding alone, bounded as in tests/tolerance.py (eps x magnitude x sqrt(width) x
depth, times SAFETY). TF32 is off (``highest`` matmul precision, checked): with it, a
matmul keeps 10 mantissa bits instead of 23 and the bounds would have to use eps = 2^-11,
not 2^-23. Each check records its largest error and bound; with
``BINDSCOPE_CUDA_TEST_REPORT=FILE`` they are written there as JSON (``FILE.gw0``, ... per
worker under ``-n``).

Excluded from the default run (``addopts`` in pyproject.toml deselects the ``cuda``
marker); ``pytest -m cuda tests/test_cuda.py`` on a machine without CUDA fails at every
test's setup, never skips. ``BINDSCOPE_CUDA_TEST_DEVICE=cpu`` compares the CPU with itself:
a dry run of this file on a machine without a GPU, nothing more.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import bindscope
from bindscope.interventions import (
    Knockout,
    Mean,
    Patch,
    PathPatch,
    Resample,
    Steer,
    Zero,
    edge_means,
    head_means,
)
from bindscope.interventions.graph import edge_graph
from bindscope.runners.attribution_metrics import LogitDifference
from bindscope.runners.attribution_patching import TargetLogprob, all_heads, attribution_scores
from bindscope.runners.binding import binding
from bindscope.runners.edges import edge_attribution
from tests.conftest import FAMILY_NAMES, PROMPTS, build_tiny
from tests.reference_edges import edge_bound, one_edge_of_each_kind, random_pairs
from tests.remote.test_simulation import RECORDS
from tests.remote.test_simulation_specs import _variants
from tests.tolerance import gradient_bound, prob_bound, rounding_bound

pytestmark = pytest.mark.cuda

DEVICE = os.environ.get("BINDSCOPE_CUDA_TEST_DEVICE", "cuda")
HEADS = [(0, 1), (1, 0), (1, 3), (2, 2)]
WRONG = [(layer, (head + 1) % 4) for layer, head in HEADS]  # the negative control's heads
METRIC = LogitDifference(5, 7)
MARGIN = 100  # a wrong head or edge must miss by more than this many bounds

ERRORS: list[dict] = []  # one row per comparison: family, check, largest error, bound


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    path = os.environ.get("BINDSCOPE_CUDA_TEST_REPORT")
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # under -n, each worker its own file
    if path:
        with open(f"{path}.{worker}" if worker else path, "w") as f:
            json.dump({"device": _device_name(), "rows": ERRORS}, f, indent=1)


def _device_name() -> str:
    if DEVICE == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"{DEVICE}, torch {torch.__version__}"


def _require_device() -> None:
    """Fail (never skip) where the GPU is missing; switch TF32 off."""
    if DEVICE not in ("cuda", "cpu"):
        pytest.fail(f"BINDSCOPE_CUDA_TEST_DEVICE={DEVICE!r}: use cuda (default) or cpu")
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.fail(
            f"-m cuda needs a CUDA GPU that torch can use; torch {torch.__version__} sees "
            "none here. Run tests/test_cuda.py on a GPU machine (a dry run on the CPU: "
            "BINDSCOPE_CUDA_TEST_DEVICE=cpu)",
            pytrace=False,
        )
    torch.set_float32_matmul_precision("highest")  # no TF32 (see the module docstring)
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def pair(request, byte_tokenizer, sp_tokenizer, tmp_path_factory):
    """``(on_cpu, on_device)``: one family's tiny model loaded from one folder twice."""
    _require_device()
    tok = sp_tokenizer if request.param == "llama" else byte_tokenizer
    folder = tmp_path_factory.mktemp(request.param)
    build_tiny(request.param, tok, self_check=False).hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    on_cpu = bindscope.load_model(folder, tokenizer=tok)
    on_device = bindscope.load_model(folder, tokenizer=tok, device=DEVICE)
    # never compare the GPU with itself: the default (no device) must be the CPU
    assert {p.device.type for p in on_cpu.hf.parameters()} == {"cpu"}, "default not on the CPU"
    return on_cpu, on_device


def _check(model, what: str, got, ref, bound: float) -> float:
    """``got`` (device run) within ``bound`` of ``ref`` (CPU run), on the CPU, NaN where
    ``ref`` is NaN; records and returns the largest difference."""
    if isinstance(ref, np.ndarray):
        assert isinstance(got, np.ndarray), f"{what}: {type(got).__name__}, not an array"
        got, ref = torch.from_numpy(got), torch.from_numpy(ref)
    assert got.device.type == "cpu", f"{what}: came back on {got.device}"
    assert got.shape == ref.shape and got.dtype == ref.dtype, what
    assert torch.equal(got.isnan(), ref.isnan()), f"{what}: NaN in other places"
    known = ~ref.isnan()
    error = float((got[known].double() - ref[known].double()).abs().max()) if known.any() else 0
    ERRORS.append({"family": model.family, "check": what, "error": error, "bound": bound})
    assert error <= bound, f"{model.family} {what}: {error:.2e} > derived bound {bound:.2e}"
    return error


def _margin(model, what: str, miss: float, bound: float) -> None:
    """A negative control: ``miss`` (a wrong head's or edge's difference) beyond MARGIN bounds."""
    ERRORS.append({"family": model.family, "check": what, "error": miss, "bound": bound})
    assert miss > MARGIN * bound, f"{model.family} {what}: {miss:.2e} <= {MARGIN} x {bound:.2e}"


def _logit_bound(model, logits) -> float:
    """Logits: rounding at their own largest size through every layer and the unembedding
    (tests/tolerance.py `logit_bound`, measured on the logits compared)."""
    magnitude = max(float(x.abs().max()) for x in logits)
    return rounding_bound(
        magnitude=magnitude, width=model.hf.config.hidden_size, depth=model.n_layers + 1
    )


def test_weights_load_on_the_device(pair):
    on_cpu, on_device = pair
    assert {p.device.type for p in on_device.hf.parameters()} == {DEVICE}
    assert {p.device.type for p in on_cpu.hf.parameters()} == {"cpu"}


def test_probabilities_logits_and_every_site(pair):
    on_cpu, on_device = pair
    bound = prob_bound(on_cpu)
    probs = zip(on_device.attention_probs(PROMPTS), on_cpu.attention_probs(PROMPTS))
    for got, ref in probs:
        _check(on_cpu, "attention_probs", got, ref, bound)
    refs = on_cpu.logits(PROMPTS)
    bound = _logit_bound(on_cpu, refs)
    for got, ref in zip(on_device.logits(PROMPTS), refs):
        _check(on_cpu, "logits", got, ref, bound)
    sites = list(on_cpu.sites)
    far, near = on_device.capture(PROMPTS, sites), on_cpu.capture(PROMPTS, sites)
    width, depth = on_cpu.hf.config.hidden_size, on_cpu.n_layers + 1
    for site in sites:
        for layer in range(on_cpu.n_layers):
            refs = [n[site][layer] for n in near]
            if site == "scores":  # masked cells are -inf in both runs; compare the others
                for f, r in zip(far, refs):
                    assert torch.equal(f[site][layer].isinf(), r.isinf()), f"scores {layer}"
                    f[site][layer] = f[site][layer].masked_fill(r.isinf(), 0)
                refs = [r.masked_fill(r.isinf(), 0) for r in refs]
            if site == "pattern":
                bound = prob_bound(on_cpu)
            else:  # rounding at the site's own largest activation, through every layer
                magnitude = max(float(r.abs().max()) for r in refs)
                bound = rounding_bound(magnitude=magnitude, width=width, depth=depth)
            for got, ref in zip((f[site][layer] for f in far), refs):
                _check(on_cpu, f"capture {site}", got, ref, bound)


def _specs(model) -> dict[str, object]:
    """Every spec, built on the CPU (means, donors, vectors) as a user builds them."""
    texts = _variants(model)
    n = len(texts[0])
    clean, corrupted = random_pairs(model)
    vector = torch.randn(model.d_model, generator=torch.Generator().manual_seed(2))
    return {
        "Zero": (PROMPTS, Zero(HEADS)),
        "Mean": (PROMPTS, Mean(HEADS, head_means(model, PROMPTS, HEADS))),
        "Patch": (texts, Patch(HEADS, texts[::-1])),
        "Resample": (texts, Resample(HEADS, texts, seed=1)),
        "Knockout": (texts, Knockout(HEADS, [(n - 1, 0), (n - 1, 1), (n - 2, 1)])),
        "Steer": (PROMPTS, Steer("resid_post", 1, 3.0 * vector)),
        "PathPatch": (clean, PathPatch(one_edge_of_each_kind(model), source=corrupted)),
        "PathPatch means": (
            clean,
            PathPatch(edge_graph(model).valid, means=edge_means(model, corrupted)),
        ),
    }


def test_logits_under_every_spec(pair):
    on_cpu, on_device = pair
    for name, (texts, spec) in _specs(on_cpu).items():
        refs = on_cpu.logits(texts, intervene=spec)
        if name.startswith("PathPatch"):  # ours and the reference's orderings, as in test_edges
            bound = edge_bound(max(float(r.abs().max()) for r in refs) + 1, on_cpu)
        else:
            bound = _logit_bound(on_cpu, refs)
        for got, ref in zip(on_device.logits(texts, intervene=spec), refs):
            _check(on_cpu, f"logits {name}", got, ref, bound)
    # negative control: the GPU's Zero against the CPU's Zero of the neighbouring heads
    refs = on_cpu.logits(PROMPTS, intervene=Zero(WRONG))
    got = on_device.logits(PROMPTS, intervene=Zero(HEADS))
    miss = max(float((g - r).abs().max()) for g, r in zip(got, refs))
    _margin(on_cpu, "negative control: Zero of wrong heads", miss, _logit_bound(on_cpu, refs))


def test_binding_eb_star(pair):
    """BSI is a mean of probabilities (within `prob_bound`); EB = max - mean of BSI over
    heads, so within twice that."""
    on_cpu, on_device = pair
    bound = prob_bound(on_cpu)
    for spec in (None, Knockout(HEADS, [(1, 0)])):
        far = binding(on_device, RECORDS, intervene=spec)
        near = binding(on_cpu, RECORDS, intervene=spec)
        what = "binding" if spec is None else "binding Knockout"
        for got, ref in zip(far, near):
            _check(on_cpu, f"{what} BSI", got.bsi, ref.bsi, bound)
            _check(on_cpu, f"{what} EB", got.eb, ref.eb, 2 * bound)
            eb_star = torch.tensor([got.eb_star, ref.eb_star], dtype=torch.float64)
            _check(on_cpu, f"{what} EB*", eb_star[:1], eb_star[1:], 2 * bound)
            if got.best_layer != ref.best_layer:  # only a tie within rounding may move it
                tie = abs(float(ref.eb[got.best_layer] - ref.eb[ref.best_layer]))
                assert tie <= 4 * bound, (what, got.best_layer, ref.best_layer)


def test_greedy_generation_under_an_intervention(pair):
    on_cpu, on_device = pair
    vector = torch.randn(on_cpu.d_model, generator=torch.Generator().manual_seed(2))
    for spec in (Zero(HEADS), Steer("resid_post", 1, 3.0 * vector)):
        got = on_device.generate_ids(PROMPTS, max_new_tokens=6, intervene=spec)
        assert got == on_cpu.generate_ids(PROMPTS, max_new_tokens=6, intervene=spec), spec
        assert all(type(t) is int for row in got for t in row)


def test_attribution_estimates(pair):
    """The attribution scan's per-head estimates (`attribution_scores`, what ``scan
    --method attribution`` calls), with their gradients taken on the device."""
    on_cpu, on_device = pair
    texts = _variants(on_cpu)
    heads = all_heads(on_cpu)
    for spec in (Zero(heads), Patch(heads, texts[::-1])):
        name = type(spec).__name__
        far = attribution_scores(on_device, texts, TargetLogprob(2), intervene=spec)
        near = attribution_scores(on_cpu, texts, TargetLogprob(2), intervene=spec)
        estimates = torch.from_numpy(near[1])
        bound = gradient_bound(on_cpu, estimates, dtype=torch.float32)
        metric_bound = _logit_bound(on_cpu, on_cpu.logits(texts))  # a log-prob of logits
        _check(on_cpu, f"attribution {name} metric", far[0], near[0], 2 * metric_bound)
        _check(on_cpu, f"attribution {name} estimates", far[1], near[1], bound)
        # negative control: the neighbouring head's estimate
        miss = float(np.abs(far[1][..., 1:] - near[1][..., :-1]).max())
        _margin(on_cpu, f"negative control: attribution {name}, next head", miss, bound)


def test_edge_attribution_scores(pair):
    on_cpu, on_device = pair
    clean, corrupted = random_pairs(on_cpu)
    metric_bound = 2 * _logit_bound(on_cpu, on_cpu.logits(clean))  # a difference of logits
    for method, steps in (("eap", 1), ("eap-ig", 2)):
        far = edge_attribution(on_device, clean, corrupted, METRIC, method=method, steps=steps)
        near = edge_attribution(on_cpu, clean, corrupted, METRIC, method=method, steps=steps)
        scores = torch.from_numpy(near.scores)
        bound = gradient_bound(on_cpu, scores)
        _check(on_cpu, f"{method} scores", far.scores, near.scores, bound)
        _check(on_cpu, f"{method} clean metric", far.clean, near.clean, metric_bound)
        _check(on_cpu, f"{method} corrupted metric", far.corrupted, near.corrupted, metric_bound)
        # negative control: each edge's score against the next sender's
        miss = float(np.abs(far.scores[:, 1:] - near.scores[:, :-1]).max())
        _margin(on_cpu, f"negative control: {method}, next sender", miss, bound)
