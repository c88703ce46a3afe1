"""Intervention specs through ``intervene=`` / ``per_row=`` equal independent computations.

Bounds: exact (``torch.equal``) where the same arithmetic runs in the same layout;
otherwise `logit_atol` (float32 eps x depth x magnitude), with a negative control showing
that a wrong head or position misses by orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import BindscopeError, HeadSpecError, InterventionError
from bindscope.interventions import (
    Knockout,
    Mean,
    Patch,
    PatternPatch,
    Resample,
    Zero,
    head_means,
    mean_ablate,
    ops,
    run_layers,
)
from tests.conftest import PROMPTS
from tests.metrics.test_binding import RECORDS
from tests.reference_patching import EPS, knockout_reference, logit_atol, patch_reference

HEADS = [(0, 1), (1, 0), (1, 3), (2, 2)]
CHANGED = 5  # the first position where a variant differs from its base text


def variants(model, count: int = 4) -> list[list[int]]:
    """Token-id texts of equal length that first differ at position ``CHANGED``."""
    base = model.tokenize(PROMPTS[2])
    vocab = [t for t in range(10, 600) if t not in base][:count]
    out = []
    for token in vocab:
        ids = list(base)
        ids[CHANGED] = token
        out.append(ids)
    return [base, *out[: count - 1]]


def _max_diff(a, b) -> float:
    return float((a - b).abs().max())


# -- Zero and Mean through intervene= equal today's primitives -----------------------------


def test_zero_and_mean_through_intervene_equal_the_primitives(tiny):
    batch = tiny.encode(PROMPTS)
    means = head_means(tiny, PROMPTS, HEADS)
    with torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
        run_layers(tiny, plan=ops.head_plan(tiny, HEADS))
        zeroed = ops.final_logits(tiny).save()
    with torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
        mean_ablate(tiny, HEADS, means)
        meaned = ops.final_logits(tiny).save()
    got_zero = tiny.logits(PROMPTS, intervene=Zero(HEADS))
    got_ablate = tiny.logits(PROMPTS, ablate=HEADS)
    got_mean = tiny.logits(PROMPTS, intervene=[Mean(HEADS, means)])
    for r in range(len(PROMPTS)):
        pad = batch.pad(r)
        # same batch, same arithmetic (x * 0 vs x = 0, where vs index-assign): bit-identical
        assert torch.equal(got_zero[r], zeroed[r, pad:])
        assert torch.equal(got_ablate[r], zeroed[r, pad:])
        assert torch.equal(got_mean[r], meaned[r, pad:])
    probs = tiny.attention_probs(PROMPTS, intervene=Zero(HEADS))
    old = tiny.attention_probs(PROMPTS, ablate=HEADS)
    assert all(torch.equal(a, b) for a, b in zip(probs, old))


def test_every_call_takes_the_ablate_shortcut(tiny):
    """``ablate=heads`` is ``intervene=Zero(heads)`` in capture, logit_lens and bsi too."""
    zero = Zero(HEADS)
    calls = {
        "capture": lambda **kw: [
            c["resid_post"][2] for c in tiny.capture(PROMPTS, "resid_post", [2], **kw)
        ],
        "logit_lens": lambda **kw: tiny.logit_lens(PROMPTS, [1, 2], **kw),
        "bsi": lambda **kw: tiny.bsi([RECORDS[0].template], RECORDS[0].term, **kw),
    }
    for name, call in calls.items():
        short, spec, plain = call(ablate=HEADS), call(intervene=zero), call()
        assert all(torch.equal(a, b) for a, b in zip(short, spec, strict=True)), name
        assert not all(torch.equal(a, b) for a, b in zip(short, plain, strict=True)), name


# -- Patch ---------------------------------------------------------------------------------


def test_patch_equals_plain_forward_hook_reference(tiny):
    texts = variants(tiny)
    sources = texts[1:] + texts[:1]
    got = tiny.logits(texts, intervene=Patch(HEADS, sources))
    clean = tiny.logits(texts)
    for text, source, value, base in zip(texts, sources, got, clean):
        ref = patch_reference(
            tiny.hf, tiny.family, HEADS, tiny.n_heads, tiny.head_dim, source, text
        )
        atol = logit_atol(ref, tiny.n_layers)
        torch.testing.assert_close(value, ref, rtol=0, atol=atol)
        # negative control: patching the wrong head misses by far more than the bound
        wrong = patch_reference(
            tiny.hf, tiny.family, [(0, 0)], tiny.n_heads, tiny.head_dim, source, text
        )
        assert _max_diff(value, wrong) > 100 * atol
        assert _max_diff(value, base) > 100 * atol  # the patch did something


def test_self_patch_equals_clean(tiny):
    clean = tiny.logits(PROMPTS)
    patched = tiny.logits(PROMPTS, intervene=Patch(HEADS, PROMPTS))
    assert all(torch.equal(a, b) for a, b in zip(patched, clean))


def test_patch_before_first_difference_is_bit_identical_after_it_not(tiny):
    target, source = variants(tiny, 2)
    clean = tiny.logits([target])[0]
    early = Patch(HEADS, [source], positions=range(CHANGED))
    late = Patch(HEADS, [source], positions=range(CHANGED, len(target)))
    # causal attention: positions before CHANGED see the same prefix in both texts
    assert torch.equal(tiny.logits([target], intervene=early)[0], clean)
    patched = tiny.logits([target], intervene=late)[0]
    assert torch.equal(patched[:CHANGED], clean[:CHANGED])
    assert _max_diff(patched[CHANGED:], clean[CHANGED:]) > 100 * logit_atol(clean, tiny.n_layers)


def test_patch_length_mismatch_names_both_texts(tiny):
    with pytest.raises(InterventionError) as err:
        tiny.logits(PROMPTS[:1], intervene=Patch(HEADS, [PROMPTS[2]]))
    message = str(err.value)
    assert tiny.name in message and "text #0" in message
    assert PROMPTS[0][:20] in message and PROMPTS[2][:20] in message
    assert f"{len(tiny.tokenize(PROMPTS[0]))} tokens" in message


# -- Resample ------------------------------------------------------------------------------


def test_resample_equals_patch_with_recorded_donors(tiny):
    texts = variants(tiny)
    spec = Resample(HEADS, texts, seed=3)
    donors = spec.donors(texts)
    assert donors == Resample(HEADS, texts, seed=3).donors(texts)  # seeded
    assert all(d != i for i, d in enumerate(donors))  # another text, never itself
    got = tiny.logits(texts, intervene=spec)
    ref = tiny.logits(texts, intervene=Patch(HEADS, [texts[d] for d in donors]))
    assert all(torch.equal(a, b) for a, b in zip(got, ref))


def test_resample_aligns_from_the_end(tiny):
    """A shorter donor patches the target's last positions only."""
    target = tiny.tokenize(PROMPTS[2])
    donor = target[4:]  # the same text without its first 4 tokens
    got = tiny.logits([target], intervene=Resample(HEADS, [donor]))[0]
    clean = tiny.logits([target])[0]
    # the donor's positions differ from the target's (shifted), so the last ones change ...
    assert _max_diff(got[-1], clean[-1]) > 100 * logit_atol(clean, tiny.n_layers)
    # ... while the first 4, which have no donor position, are untouched
    assert torch.equal(got[:4], clean[:4])


# -- Knockout ------------------------------------------------------------------------------


def _edges(n: int) -> list[tuple[int, int]]:
    """A few causal edges of an n-token text, last query included."""
    return [(n - 1, 0), (n - 1, n - 2), (n // 2, 1)]


def test_knockout_equals_eager_with_minus_infinity_under_left_padding(tiny):
    texts = PROMPTS  # different lengths: rows are left-padded in the batch
    lengths = [len(tiny.tokenize(t)) for t in texts]
    per_row = [Knockout(HEADS, _edges(n)) if n > 3 else None for n in lengths]
    got = tiny.logits(texts, per_row=per_row)
    probs = tiny.attention_probs(texts, per_row=per_row)
    clean = tiny.logits(texts)
    for text, value, prob, base, spec in zip(texts, got, probs, clean, per_row):
        ids = torch.tensor([tiny.tokenize(text)])
        edges = spec.edges if spec else []
        with knockout_reference(tiny.hf, HEADS if spec else [], edges), torch.no_grad():
            out = tiny.hf(ids, output_attentions=True)
        ref = out.logits[0].float()
        atol = logit_atol(ref, tiny.n_layers)
        torch.testing.assert_close(value, ref, rtol=0, atol=atol)
        ref_probs = torch.stack([a[0] for a in out.attentions]).float()
        # probabilities lie in [0, 1]: batching noise is a few eps per layer
        torch.testing.assert_close(prob, ref_probs, rtol=0, atol=16 * (tiny.n_layers + 1) * EPS)
        if spec:
            for layer, head in HEADS:
                for q, k in edges:
                    assert prob[layer, head, q, k] == 0
            assert _max_diff(value, base) > 100 * atol  # negative control: clean is far off


def test_knockout_of_no_edge_is_bit_identical(tiny):
    clean = tiny.logits(PROMPTS)
    got = tiny.logits(PROMPTS, intervene=Knockout(HEADS, []))
    assert all(torch.equal(a, b) for a, b in zip(got, clean))
    probs = tiny.attention_probs(PROMPTS, intervene=Knockout(HEADS, []))
    assert all(torch.equal(a, b) for a, b in zip(probs, tiny.attention_probs(PROMPTS)))


# -- per-row specs against separate runs ----------------------------------------------------


def _per_row_cases(model):
    texts = variants(model, 3)
    means = head_means(model, PROMPTS, HEADS)
    n = len(texts[0])
    per_row = [
        [Zero(HEADS[:2]), Knockout(HEADS[2:], _edges(n))],
        None,
        [Patch(HEADS[1:], [texts[0]]), Mean(HEADS[:1], means)],
    ]
    return texts, per_row


def test_per_row_logits_and_probs_equal_separate_runs(tiny):
    texts, per_row = _per_row_cases(tiny)
    logits = tiny.logits(texts, per_row=per_row)
    probs = tiny.attention_probs(texts, per_row=per_row)
    for text, spec, value, prob in zip(texts, per_row, logits, probs):
        alone = tiny.logits([text], intervene=spec)[0]
        torch.testing.assert_close(value, alone, rtol=0, atol=logit_atol(alone, tiny.n_layers))
        alone_probs = tiny.attention_probs([text], intervene=spec)[0]
        torch.testing.assert_close(prob, alone_probs, rtol=0, atol=16 * 4 * EPS)


def test_per_row_generation_equals_separate_runs(tiny):
    texts = PROMPTS
    means = head_means(tiny, PROMPTS, HEADS)
    per_row = [Knockout(HEADS, [(4, 1), (4, 3)]), [Zero(HEADS[:2])], Mean(HEADS, means)]
    got = tiny.generate_ids(texts, max_new_tokens=5, per_row=per_row)
    for text, spec, ids in zip(texts, per_row, got):
        assert ids == tiny.generate_ids([text], max_new_tokens=5, intervene=spec)[0]
    assert tiny.generate(texts[:1], max_new_tokens=3, intervene=Zero(HEADS)) == [
        tiny.tokenizer.decode(tiny.generate_ids(texts[:1], max_new_tokens=3, ablate=HEADS)[0])
    ]


# -- bad specs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "error", "words"),
    [
        (Zero([(9, 0)]), HeadSpecError, ["layer 9"]),
        (Patch([(0, 7)], PROMPTS), HeadSpecError, ["head 7"]),
        (Knockout([(0, 0)], [(40, 1)]), InterventionError, ["(40, 1)", "text #0"]),
        (Knockout([(0, 0)], [(2, 3)]), InterventionError, ["(2, 3)"]),
        (Knockout([(0, 0)], [(1, 0), (1, 1)]), InterventionError, ["every key of query 1"]),
        (Resample([(0, 0)], []), InterventionError, ["empty"]),
        (Resample([(0, 0)], [PROMPTS[0]]), InterventionError, ["text #0"]),
        (Patch([(0, 0)], PROMPTS[:2]), InterventionError, ["2 source texts for 1"]),
        (Patch([(0, 0)], PROMPTS[:1], positions=[50]), InterventionError, ["[50]"]),
    ],
)
def test_bad_specs_raise_bindscope_errors_naming_model_head_or_text(tiny, spec, error, words):
    with pytest.raises(error) as err:
        tiny.logits(PROMPTS[:1], intervene=spec)
    assert isinstance(err.value, BindscopeError)
    for word in words:
        assert word in str(err.value)
    assert tiny.name in str(err.value) or isinstance(spec, Resample)


def test_per_row_count_and_generation_refusals(tiny):
    with pytest.raises(InterventionError, match="per_row has 1 entries for 2 texts"):
        tiny.logits(PROMPTS[:2], per_row=[None])
    with pytest.raises(InterventionError, match="fixed-length"):
        tiny.generate_ids(PROMPTS[:1], max_new_tokens=2, intervene=Patch(HEADS, PROMPTS[:1]))


# -- consistent primitives -----------------------------------------------------------------


def test_primitives_share_argument_order_and_capture_keyed_by_layer(tiny):
    from bindscope.interventions import capture_probs

    means = head_means(tiny, PROMPTS, HEADS)
    batch = tiny.encode(PROMPTS[:2])
    found = {}
    with tiny.eager(), torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
        for layer in range(tiny.n_layers):
            mean_ablate(tiny, HEADS, means, layers=[layer])  # (model, heads, means)
            found.update(capture_probs(tiny, layers=[layer]))
    assert sorted(found) == list(range(tiny.n_layers))
    reference = tiny.attention_probs(PROMPTS[:2], intervene=Mean(HEADS, means))
    for r in range(2):
        pad = batch.pad(r)
        got = torch.stack([found[layer][r, :, pad:, pad:] for layer in range(tiny.n_layers)])
        assert torch.equal(got, reference[r])


def test_knockout_under_sdpa_equals_the_eager_reference(tiny):
    """The mask edit also works when the model runs sdpa (bool or float mask, GQA)."""
    texts = PROMPTS
    lengths = [len(tiny.tokenize(t)) for t in texts]
    per_row = [Knockout(HEADS, _edges(n)) if n > 3 else None for n in lengths]
    eager = tiny.logits(texts, per_row=per_row)
    previous = tiny.attn_implementation
    try:
        tiny.hf.set_attn_implementation("sdpa")
    except ValueError:
        pytest.skip(f"{tiny.family} has no sdpa attention")
    try:
        got = tiny.logits(texts, per_row=per_row)
    finally:
        tiny.hf.set_attn_implementation(previous)
    for value, ref in zip(got, eager):
        torch.testing.assert_close(value, ref, rtol=0, atol=logit_atol(ref, tiny.n_layers))


def test_calls_that_end_early_run_beside_donor_and_pattern_invokes(tiny):
    """A Patch or PatternPatch of the last layer leaves layer 0's lens and probabilities.

    Both read their source in invokes of their own, past the layer-0 reads where these two
    calls used to stop the model (nnsight's out-of-order error, not a BindscopeError).
    """
    model = tiny
    last = model.n_layers - 1
    ids = model.tokenize(PROMPTS[0])
    other = [*ids[:2], *reversed(ids[2:])]  # same length, other tokens
    lens, probs = model.logit_lens([ids], layers=[0]), model.attention_probs([ids], layers=[0])
    for spec in (Patch([(last, 0)], [other]), PatternPatch([(last, 0)], [other])):
        got = model.logit_lens([ids], layers=[0], intervene=spec)
        assert float((got[0] - lens[0]).abs().max()) <= logit_atol(lens[0], model.n_layers)
        got = model.attention_probs([ids], layers=[0], intervene=spec)
        assert float((got[0] - probs[0]).abs().max()) <= logit_atol(probs[0], model.n_layers)
