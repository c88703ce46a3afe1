"""The packed choice pass: a prompt's choices in one row under a block mask, exactly.

The reference is one unbatched HF forward per prompt + choice (``one_forward_per_choice``);
the negative control lets each choice see the choices packed before it, as a plain causal
mask over the row would, and must miss the same bound by orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.prompts.continuations import continuation_ids
from bindscope.runners import packing, prefix
from bindscope.runners.behaviour import recognition
from bindscope.runners.packing import choice_layout
from tests.conftest import FAMILY_NAMES, build_tiny
from tests.experiments.conftest import tiny_llama  # noqa: F401 (fixture)
from tests.metrics.test_behaviour import REC, one_forward_per_choice
from tests.runners.test_recognition_full import HEADS, _bound

PER_RECORD = [[], HEADS, []]


def _max_diff(model, got) -> float:
    refs = [one_forward_per_choice(model, r, hs) for r, hs in zip(REC, PER_RECORD)]
    return max(abs(a - b) for res, ref in zip(got, refs) for a, b in zip(res.scores, ref))


def _across_choices(offset: torch.Tensor, segment: torch.Tensor) -> torch.Tensor:
    """The fault: a causal mask over the whole row, so a choice sees those before it."""
    b, width = offset.shape
    return torch.ones(width, width, dtype=torch.bool).tril().expand(b, -1, -1)


def _packed_equals_the_reference(model, monkeypatch) -> None:
    """Packed and padded within the float32 bound of one forward per choice; a mask that
    lets the choices see each other misses that bound by more than 100x."""
    assert choice_layout(model) == "packed"
    bound = _bound(model)
    assert _max_diff(model, recognition(model, REC, per_row=PER_RECORD)) <= bound
    with monkeypatch.context() as patched:
        patched.setattr(prefix, "choice_layout", lambda model: "padded")
        padded = recognition(model, REC, per_row=PER_RECORD)
    assert _max_diff(model, padded) <= bound
    monkeypatch.setattr(packing, "_own_keys", _across_choices)
    leaky = recognition(model, REC, per_row=PER_RECORD)
    assert _max_diff(model, leaky) > 100 * bound, (model.family, _max_diff(model, leaky), bound)


def test_packed_choices_equal_one_forward_per_choice(tiny, monkeypatch):
    """Every family packs under eager attention, Gemma 3's window of 4 and its sliding
    cache included."""
    _packed_equals_the_reference(tiny, monkeypatch)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_packed_choices_under_sdpa(family, byte_tokenizer, sp_tokenizer, monkeypatch):
    """sdpa (transformers' default, so real models' C5) takes the same additive mask."""
    tokenizer = sp_tokenizer if family == "llama" else byte_tokenizer
    try:
        model = build_tiny(family, tokenizer, attn="sdpa", self_check=False)
    except ValueError as refused:  # Gemma 2: transformers has no sdpa for it
        pytest.skip(f"{family}: {str(refused)[:80]}")
    assert model.attn_implementation == "sdpa"
    _packed_equals_the_reference(model, monkeypatch)


def test_the_choice_pass_runs_no_padding(tiny_llama):  # noqa: F811
    """One record per batch: the choice pass runs each choice's tokens but its last, once,
    not every choice padded to the longest."""
    positions = []
    mlp = tiny_llama.hf.model.layers[0].mlp
    handle = mlp.register_forward_hook(lambda m, a, o: positions.append(a[0].shape[:-1].numel()))
    try:
        recognition(tiny_llama, REC, batch_size=1)
    finally:
        handle.remove()
    expected = []
    for r in REC:
        sizes = [len(continuation_ids(tiny_llama.tokenizer, c)) - 1 for c in r.choices or ()]
        expected.append(len(tiny_llama.tokenize(r.template)))
        expected += [sum(sizes)] if max(sizes) > 0 else []
    assert sorted(positions) == sorted(expected)  # records run in order of length


def test_a_packed_choice_keeps_gemma3s_window(byte_tokenizer, monkeypatch):
    """The window of 4 binds on the tiny Gemma 3: the same pass with no window in the
    packed mask misses the bound of one forward per choice by more than 100x."""
    model = build_tiny("gemma3", byte_tokenizer, self_check=False)
    windows = packing.attention_windows
    monkeypatch.setattr(packing, "attention_windows", lambda c: (None,) * len(windows(c)))
    unwindowed = recognition(model, REC, per_row=PER_RECORD)
    assert _max_diff(model, unwindowed) > 100 * _bound(model)


def test_a_mask_packing_cannot_rebuild_runs_padded(byte_tokenizer, monkeypatch):
    """A bidirectional mask or flash attention (no additive mask): the padded layout, said
    by `choice_layout`, and the scores still those of one forward per choice."""
    model = build_tiny("gemma3", byte_tokenizer, self_check=False)
    monkeypatch.setattr(model.hf.config, "use_bidirectional_attention", True, raising=False)
    assert choice_layout(model) == "padded"
    monkeypatch.undo()
    flash = property(lambda self: "flash_attention_2")
    monkeypatch.setattr(type(model), "attn_implementation", flash)
    assert choice_layout(model) == "padded"
    assert _max_diff(model, recognition(model, REC, per_row=PER_RECORD)) <= _bound(model)
