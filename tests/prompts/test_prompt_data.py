"""The shipped prompt data: sizes, balance, rubric coverage, controls, spans on SmolLM2."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import pytest

from bindscope import prompts
from bindscope.prompts.prompt_sets import data_path

EXPECTED_TERMS = 41


@pytest.fixture(scope="module")
def canonical():
    return prompts.load("canonical")


@pytest.fixture(scope="module")
def controls():
    return prompts.load("controls")


def _json(name):
    return json.loads(data_path(name).read_text(encoding="utf-8"))


def test_canonical_has_41_terms_with_5_recognition_and_6_generation(canonical):
    by_term = defaultdict(Counter)
    for rec in canonical:
        by_term[rec.term][rec.task] += 1
    assert len(by_term) == EXPECTED_TERMS
    for term, counts in by_term.items():
        assert counts == Counter(recognition=5, generation=6), term
    assert len(canonical.records) == 451


def test_each_term_has_one_true_false_item_and_both_truth_values_occur(canonical):
    tf = [r for r in canonical if r.task == "recognition" and len(r.choices) == 2]
    assert len(tf) == EXPECTED_TERMS
    answers = Counter(r.choices[r.answer_idx] for r in tf)
    assert answers["True"] >= 10 and answers["False"] >= 10, answers


def test_multiple_choice_answer_position_is_balanced(canonical):
    mc = [r for r in canonical if r.task == "recognition" and len(r.choices) == 4]
    counts = Counter(r.answer_idx for r in mc)
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) - min(counts.values()) <= 2, counts


def test_distractors_vary_across_terms(canonical):
    mc = [r for r in canonical if r.task == "recognition" and len(r.choices) == 4]
    distractors = Counter(c for r in mc for i, c in enumerate(r.choices) if i != r.answer_idx)
    # The published set reused a few generic distractors for every term.
    assert distractors.most_common(1)[0][1] <= 6, distractors.most_common(3)


def test_rubric_covers_every_term_without_its_own_words(canonical):
    rubric = _json("rubrics.json")
    terms = {r.term for r in canonical}
    assert terms <= set(rubric["terms"])
    for term in terms:
        entry = rubric["terms"][term]
        assert len(entry["keywords"]) >= rubric["threshold"], term
        assert entry["contradictions"], term
        term_words = set(re.findall(r"[a-z]+", term.lower()))
        for kw in entry["keywords"]:
            assert kw.lower() != term.lower(), (term, kw)
            assert not set(kw.lower().split()) <= term_words, (term, kw)


def test_landmark_region_rubric_can_score(canonical):
    # The published rubric had no entry for this term, so it always scored 0.
    from bindscope.metrics.behaviour import default_rubric, rubric_score

    kws = default_rubric()["terms"]["landmark region"]["keywords"]
    text = "It marks " + ", ".join(kws[:3]) + " on the page."
    assert rubric_score(text, "landmark region").score == pytest.approx(1.0)


def test_exemplars_and_paraphrases_cover_every_term(canonical):
    ex = _json("exemplars.json")["terms"]
    rubric = _json("rubrics.json")["terms"]
    for term in {r.term for r in canonical}:
        assert ex[term]["exemplar"] and ex[term]["paraphrase"], term
        para = ex[term]["paraphrase"].lower()
        hits = [kw for kw in rubric[term]["keywords"] if re.search(rf"\b{re.escape(kw)}\b", para)]
        assert not hits, (term, hits)


def test_control_groups_have_at_least_10_terms(controls):
    groups = defaultdict(set)
    for rec in controls:
        assert rec.control_group, rec.source
        groups[rec.control_group].add(rec.term)
    expected = {
        "backwards_shuffle",
        "cross_term_swap",
        "semantic_field",
        "frequency_matched",
        "random_unrelated",
        "rare_token_pairs",
        "cross_language",
        "true_nonsense",
        "domain_adjacent",
        "wrong_domain",
    }
    assert expected <= set(groups), sorted(groups)
    for group, terms in groups.items():
        assert len(terms) >= 10, (group, len(terms))


def test_build_script_output_is_up_to_date():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = root / "tools" / "build_prompts.py"
    if not script.exists():
        pytest.skip("tools/ not present (installed package)")
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, cwd=root
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_every_canonical_term_spans_two_or_more_smollm2_tokens(smollm2, canonical):
    from bindscope.prompts.spans import locate

    short = []
    for rec in canonical:
        span = locate(smollm2, rec.template, rec.term, prompt_id=rec.key)
        if len(span.indices) < 2:
            short.append((rec.key, span.tokens))
    assert not short, short
