"""The residual-start scan equals the naive scan and independent ``model.logits`` runs."""

from __future__ import annotations

import numpy as np
import torch

from bindscope.interventions import Zero, head_means
from bindscope.runners.scan import ScoredSequence, condition_scores
from tests.conftest import PROMPTS
from tests.tolerance import logit_bound

TEXTS = [*PROMPTS, "Captions and audio description help deaf and blind users."]


def _sequences(model):
    # different lengths, so the batch is left-padded (GPT-2 needs its position ids right)
    out = []
    for text in TEXTS:
        ids = model.tokenize(text)
        out.append(ScoredSequence(ids, min(3, len(ids) - 1)))
    return out


def _conditions(model):
    heads = [[(layer, head)] for layer in range(model.n_layers) for head in range(model.n_heads)]
    return [*heads, [(1, h) for h in range(model.n_heads)]]  # one whole layer


def _logprob_bound(model) -> float:
    # A mean log-prob is a log-softmax of logits: each moves by at most twice the logits'
    # largest error (the logit itself and the log-sum-exp), so twice the logit bound.
    return 2 * logit_bound(model, TEXTS)


def test_residual_start_equals_naive_scan(tiny):
    sequences, conditions = _sequences(tiny), _conditions(tiny)
    # rows_per_pass=5 mixes conditions and cuts them across passes
    clean, fast = condition_scores(tiny, sequences, conditions, batch_size=3, rows_per_pass=5)
    clean_naive, naive = condition_scores(
        tiny, sequences, conditions, batch_size=3, strategy="naive"
    )
    bound = _logprob_bound(tiny)
    assert np.abs(clean - clean_naive).max() <= bound
    assert np.abs(fast - naive).max() <= bound, (np.abs(fast - naive).max(), bound)
    # negative control: the heads do change the scores, by far more than the bound
    assert np.abs(fast - clean[None]).max() > 100 * bound


def test_scan_effect_equals_logits_under_zero(tiny):
    sequences = _sequences(tiny)
    picks = [(0, 1), (1, 3), (tiny.n_layers - 1, 0)]
    _, scores = condition_scores(tiny, sequences, [[h] for h in picks], batch_size=2)
    bound = _logprob_bound(tiny)
    for c, head in enumerate(picks):
        logits = tiny.logits(TEXTS, intervene=Zero([head]))
        for s, (seq, got) in enumerate(zip(sequences, logits)):
            logp = got.log_softmax(-1)
            n = len(seq.ids)
            want = np.mean([float(logp[p - 1, seq.ids[p]]) for p in range(n - seq.n_target, n)])
            assert abs(scores[c, s] - want) <= bound, (head, s, scores[c, s], want)
        # a different head gives a different score: the comparison can fail
    assert np.abs(scores[0] - scores[1]).max() > 100 * bound


def test_mean_ablation_residual_equals_naive(tiny_llama):
    model = tiny_llama
    sequences, conditions = _sequences(model), _conditions(model)
    heads = sorted({h for c in conditions for h in c})
    means = head_means(model, TEXTS, heads)
    _, fast = condition_scores(model, sequences, conditions, means=means, batch_size=2)
    _, naive = condition_scores(
        model, sequences, conditions, means=means, batch_size=2, strategy="naive"
    )
    assert np.abs(fast - naive).max() <= _logprob_bound(model)


def test_skipped_layers_do_not_run(tiny_llama):
    model = tiny_llama
    calls = [0] * model.n_layers
    hooks = [
        model.nnsight.model.layers[i].self_attn._module.register_forward_hook(
            lambda *_, i=i: calls.__setitem__(i, calls[i] + 1)
        )
        for i in range(model.n_layers)
    ]
    try:
        condition_scores(model, _sequences(model), [[(model.n_layers - 1, 0)]], batch_size=8)
    finally:
        for hook in hooks:
            hook.remove()
    # the clean pass runs every layer; the condition pass only the last
    assert calls == [1] * (model.n_layers - 1) + [2]
    assert torch.is_grad_enabled()


def _hooked_logprob(model, sequence, donor, heads):
    """Independent reference: plain torch hooks, no nnsight. A forward-pre-hook records the
    donor's per-head outputs at the output projection; a second run writes them, aligned
    from the end, into the listed heads of ``sequence``; returns its mean target log-prob."""
    from tests.reference import o_proj_module

    hd, n_heads = model.head_dim, model.n_heads
    kept: dict[int, torch.Tensor] = {}
    layers = sorted({layer for layer, _ in heads})

    def run(ids, hook_for):
        handles = [
            o_proj_module(model.hf, model.family, layer).register_forward_pre_hook(hook_for(layer))
            for layer in layers
        ]
        try:
            with torch.no_grad():
                return model.hf(torch.tensor([list(ids)])).logits[0]
        finally:
            for h in handles:
                h.remove()

    def record(layer):
        def hook(module, args):
            kept[layer] = args[0][0].view(-1, n_heads, hd).clone()

        return hook

    def write(layer):
        def hook(module, args):
            x = args[0].clone()
            view = x[0].view(-1, n_heads, hd)
            k = min(view.shape[0], kept[layer].shape[0])
            for lay, head in heads:
                if lay == layer:
                    view[-k:, head] = kept[layer][-k:, head]
            return (x, *args[1:])

        return hook

    run(donor.ids, record)
    logits = run(sequence.ids, write).log_softmax(-1)
    n, t = len(sequence.ids), sequence.n_target
    return float(np.mean([float(logits[p - 1, sequence.ids[p]]) for p in range(n - t, n)]))


def test_resample_equals_plain_hook_replacement(tiny):
    sequences = _sequences(tiny)
    donors = sequences[1:] + sequences[:1]  # each takes the next text's outputs
    conditions = [[(0, 1)], [(1, 2)], [(2, 0)], [(1, h) for h in range(tiny.n_heads)]]
    clean, fast = condition_scores(
        tiny, sequences, conditions, donors=donors, batch_size=3, rows_per_pass=5
    )
    _, naive = condition_scores(
        tiny, sequences, conditions, donors=donors, batch_size=3, strategy="naive"
    )
    bound = _logprob_bound(tiny)
    for c, heads in enumerate(conditions):
        for s, (sequence, donor) in enumerate(zip(sequences, donors)):
            ref = _hooked_logprob(tiny, sequence, donor, heads)
            assert abs(fast[c, s] - ref) <= bound and abs(naive[c, s] - ref) <= bound
    # negative controls: resampling changes scores, and differs from zero-ablation
    _, zeroed = condition_scores(tiny, sequences, conditions, batch_size=3)
    assert np.abs(fast - clean[None]).max() > 100 * bound
    assert np.abs(fast - zeroed).max() > 100 * bound
