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
