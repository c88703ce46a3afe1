"""A small prompt set in the tiny tokenizer's vocabulary, written as a real prompt file."""

from __future__ import annotations

import json
from pathlib import Path

TERMS = {
    "screen reader": "a screen reader",
    "skip link": "a skip link",
    "color contrast": "color contrast",
    "heading structure": "heading structure",
}


def records() -> list[dict]:
    out = []
    for term, phrase in TERMS.items():
        out += [
            {
                "prompt_id": "rec_001",
                "term": term,
                "task": "recognition",
                "template": f"In web accessibility, {phrase} helps: A) blind users B) the dog "
                "C) the river D) the town",
                "choices": ["blind users", "the dog", "the river", "the town"],
                "answer_idx": 0,
            },
            {
                "prompt_id": "rec_002",
                "term": term,
                "task": "recognition",
                "template": f"True or False: {phrase} helps keyboard users.",
                "choices": ["True", "False"],
                "answer_idx": 0,
            },
            {
                "prompt_id": "rec_003",
                "term": term,
                "task": "recognition",
                "template": f"Developers should test {phrase}: A) image B) text C) focus D) page",
                "choices": ["image", "text", "focus", "page"],
                "answer_idx": 2,
            },
            {
                "prompt_id": "gen_001",
                "term": term,
                "task": "generation",
                "template": f"In web accessibility, {phrase} is",
                "max_tokens": 4,
            },
            {
                "prompt_id": "gen_002",
                "term": term,
                "task": "generation",
                "template": f"Developers should test {phrase} and",
                "max_tokens": 4,
            },
        ]
    return out


def write(folder: Path, rows: list[dict] | None = None, name: str = "tiny.jsonl") -> Path:
    path = Path(folder) / name
    path.write_text("".join(json.dumps(r) + "\n" for r in (rows or records())), "utf-8")
    return path


RUBRIC = {
    "version": 1,
    "threshold": 3,
    "terms": {
        t: {"keywords": ["the", "users", "page", "text", "keyboard"], "contradictions": ["dog"]}
        for t in TERMS
    },
}


EXEMPLARS = {
    "terms": {
        t: {
            "exemplar": f"Example: {p} helps blind users read the page text.",
            "paraphrase": f"Example: {p} is something people use.",
        }
        for t, p in TERMS.items()
    }
}

CONTROL_GROUPS = {
    "backwards_shuffle": ("V1", ["reader screen", "link skip", "contrast color"]),
    "true_nonsense": ("V2", ["blorp wiggle", "zanter flomp", "quib dorple"]),
}


def control_rows() -> list[dict]:
    """Control items in generation stems, two stems per control term."""
    out = []
    for group, (family, terms) in CONTROL_GROUPS.items():
        for i, term in enumerate(terms):
            for j, stem in enumerate(("In web accessibility, a {} is", "People say the {} is")):
                out.append(
                    {
                        "prompt_id": f"ctrl_{group[:2]}_{2 * i + j + 1:03d}",
                        "term": term,
                        "task": "generation",
                        "template": stem.format(term),
                        "max_tokens": 4,
                        "control_group": group,
                        "control_family": family,
                    }
                )
    return out
