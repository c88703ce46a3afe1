"""Behaviour scoring: batched recognition equals one forward per choice; rubric maths."""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InputError
from bindscope.metrics.behaviour import rubric_score
from bindscope.prompts import PromptRecord
from bindscope.runners.behaviour import generation, recognition

REC = [
    PromptRecord(
        "rec_001",
        "screen reader",
        "recognition",
        "A screen reader is used by: A) blind users B) cooks C) pilots D) nobody",
        choices=("blind users", "cooks", "pilots who fly", "nobody"),
        answer_idx=0,
    ),
    PromptRecord(
        "rec_002",
        "alt text",
        "recognition",
        "True or False: alt text describes images.",
        choices=("True", "False"),
        answer_idx=0,
    ),
    PromptRecord(
        "rec_003",
        "skip link",
        "recognition",
        "What does a skip link skip? A) navigation B) images C) text D) audio",
        choices=("repeated navigation", "images", "the text", "audio"),
        answer_idx=1,
    ),
]


def one_forward_per_choice(model, record, heads=()):
    """The published scorer: prompt + ' ' + choice, one unbatched forward each."""
    prompt = model.tokenize(record.template)
    scores = []
    for choice in record.choices:
        c = model.tokenizer(" " + choice, add_special_tokens=False)["input_ids"]
        logits = model.logits([prompt + c], ablate=list(heads))[0]
        logp = logits.log_softmax(-1)
        scores.append(sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(c)) / len(c))
    return scores


@pytest.mark.parametrize("strategy", ["shared_prefix", "full"])
def test_batched_recognition_equals_one_forward_per_choice(tiny, strategy):
    heads = [(1, 0), (2, 3)]
    per_record = [[], heads, []]
    got = recognition(tiny, REC, per_row=per_record, strategy=strategy, batch_size=2)
    for record, result, hs in zip(REC, got, per_record):
        ref = one_forward_per_choice(tiny, record, hs)
        assert len(result.scores) == len(record.choices)
        assert max(abs(a - b) for a, b in zip(result.scores, ref)) <= 1e-4
        assert result.prediction == max(range(len(ref)), key=lambda i: ref[i])
        assert result.correct == int(result.prediction == record.answer_idx)


def test_rubric_score_formula():
    rubric = {
        "threshold": 3,
        "terms": {
            "alt text": {
                "keywords": ["image", "describe", "screen reader", "blind"],
                "contradictions": ["font", "tooltip"],
            }
        },
    }
    assert rubric_score(
        "It helps to describe an image.", "alt text", rubric
    ).score == pytest.approx(2 / 3)
    r = rubric_score("Describe the image for blind screen reader users", "alt text", rubric)
    assert r.score == 1.0 and set(r.hits) == {"image", "describe", "screen reader", "blind"}
    r = rubric_score("describe image blind, a tooltip font", "alt text", rubric)
    assert r.score == pytest.approx(1.0 - 0.4) and len(r.contradictions) == 2
    assert rubric_score("imagery describes", "alt text", rubric).score == 0.0  # whole words only
    assert rubric_score("a font", "alt text", rubric).score == 0.0  # clipped at 0
    with pytest.raises(InputError, match="no rubric for term 'tree grid'"):
        rubric_score("x", "tree grid", rubric)


def test_generation_matches_model_generate_and_ablation(tiny):
    rubric = {
        "threshold": 3,
        "terms": {"screen reader": {"keywords": ["the"], "contradictions": []}},
    }
    records = [
        PromptRecord(
            "gen_001",
            "screen reader",
            "generation",
            "In web accessibility, a screen reader is",
            max_tokens=6,
        )
    ]
    got = generation(tiny, records, rubric=rubric)
    assert got[0].text == tiny.generate([records[0].template], max_new_tokens=6)[0]
    ablated = generation(tiny, records, rubric=rubric, ablate=[(0, 0), (1, 1), (2, 2)])
    assert (
        ablated[0].text
        == tiny.generate([records[0].template], max_new_tokens=6, ablate=[(0, 0), (1, 1), (2, 2)])[
            0
        ]
    )


def test_wrong_task_is_rejected(tiny):
    with pytest.raises(InputError, match="recognition\\(\\) got a generation record"):
        recognition(tiny, [PromptRecord("g", "alt text", "generation", "alt text", max_tokens=2)])


def head_rows(model, monkeypatch, run) -> tuple[list[int], object]:
    """The positions each LM-head (unembedding) call of ``run()`` ran on, and its result."""
    vocab = model.hf.get_output_embeddings().weight.shape[0]
    rows: list[int] = []
    linear = torch.nn.functional.linear

    def counting(x, w, b=None):
        if w.shape[0] == vocab:
            rows.append(x.shape[:-1].numel())
        return linear(x, w, b)

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "linear", counting)
        result = run()
    return rows, result


def test_recognition_runs_the_lm_head_only_where_a_score_reads_it(tiny, monkeypatch):
    """Prompt pass: its last position; choice pass: only the tokens after each choice's first."""
    from bindscope.runners.prefix import keeps_logits

    if not keeps_logits(tiny):
        pytest.skip(f"{tiny.family}: forward takes no logits_to_keep")
    question = "Alt text: yes or no?"
    one_token = PromptRecord("rec_9", "alt text", "recognition", question, choices=("a", "b"))
    # choices of 1 to 10 tokens
    multi, _ = head_rows(tiny, monkeypatch, lambda: recognition(tiny, REC[:1], batch_size=1))
    rows, _ = head_rows(tiny, monkeypatch, lambda: recognition(tiny, [one_token], batch_size=1))
    lengths = {
        c: len(tiny.tokenizer(" " + c, add_special_tokens=False)["input_ids"])
        for c in (*REC[0].choices, *one_token.choices)
    }
    assert multi == [1, sum(lengths[c] - 1 for c in REC[0].choices)]
    assert lengths["a"] == lengths["b"] == 1 and rows == [1]  # no choice pass at all


def test_the_shared_prefix_cache_goes_by_the_forwards_own_name(tiny):
    """No deprecated keyword: transformers drops ``past_key_values`` in 5.40 (pin: <6)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recognition(tiny, REC[:1], strategy="shared_prefix")
    messages = [str(w.message) for w in caught if "past_key_values" in str(w.message)]
    assert messages == []
