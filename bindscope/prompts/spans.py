"""Locate a term in a text by characters, then map it to tokens with offsets.

Character matching is case-insensitive and word-bounded, accepts plural forms of the last
word ("aria attributes") and aliases ("alternative text" for "alt text"). Mapping through
the tokenizer's offset mapping is right for every tokenizer, with or without leading-space
tokens, and never guesses a position: a term that is not found raises.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from bindscope.errors import SpanNotFoundError
from bindscope.prompts.datafiles import data_path, load_json


@functools.lru_cache(maxsize=1)
def aliases() -> dict[str, tuple[str, ...]]:
    """The alias table shipped with the package (``data/aliases.json``)."""
    if not data_path("aliases.json").is_file():
        return {"alt text": ("alternative text",)}
    return {k: tuple(v) for k, v in load_json("aliases.json")["aliases"].items()}


@functools.lru_cache(maxsize=4096)
def _pattern(form: str) -> re.Pattern:
    words = [re.escape(w) for w in form.split()]
    words[-1] += r"(?:s|es)?"  # plural of the last word
    return re.compile(r"(?<![\w-])" + r"[\s-]+".join(words) + r"(?![\w-])", re.IGNORECASE)


def find_term_chars(text: str, term: str, extra_aliases=()) -> tuple[int, int] | None:
    """Character span ``[start, end)`` of the first occurrence of the term or an alias."""
    best = None
    for form in (term, *aliases().get(term.lower(), ()), *extra_aliases):
        match = _pattern(form).search(text)
        if match and (
            best is None
            or match.start() < best[0]
            or (match.start() == best[0] and match.end() > best[1])
        ):
            best = (match.start(), match.end())
    return best


@dataclass(frozen=True)
class Span:
    """Where a term sits in a tokenized prompt.

    Attributes:
        indices: Token positions of the term (including BOS offset when present).
        tokens: The term's tokens as strings.
        chars: Character span of the matched text.
        n_tokens: Length of the prompt in tokens.
        bos: Whether position 0 is a BOS token.
    """

    indices: tuple[int, ...]
    tokens: tuple[str, ...]
    chars: tuple[int, int]
    n_tokens: int
    bos: bool

    @property
    def flags(self) -> tuple[str, ...]:
        """Audit flags: single_token, at_position_0 (the attention sink), bos."""
        out = []
        if len(self.indices) < 2:
            out.append("single_token")
        if self.indices and self.indices[0] == 0:
            out.append("at_position_0")
        if self.bos:
            out.append("bos")
        return tuple(out)


def locate(model, text: str, term: str, *, prompt_id: str = "?") -> Span:
    """Find the term's token span in ``text`` as ``model`` tokenizes it.

    Raises:
        SpanNotFoundError: The term (or its plural or alias) is not in the text.
    """
    chars = find_term_chars(text, term)
    if chars is None:
        raise SpanNotFoundError(
            f"prompt {prompt_id}: term {term!r} not found in {text!r} (case-insensitive, plural "
            "and alias forms tried); fix the template or add an alias to data/aliases.json"
        )
    ids, offsets = model.tokenize(text, offsets=True)
    start, end = chars
    indices = tuple(i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start)
    if not indices:
        raise SpanNotFoundError(
            f"prompt {prompt_id}: term {term!r} found at characters {start}..{end} of {text!r} "
            "but no token overlaps it (tokenizer offsets missing?)"
        )
    bos = (
        bool(ids)
        and model.tokenizer.bos_token_id is not None
        and ids[0] == model.tokenizer.bos_token_id
    )
    tokens = tuple(model.tokenizer.convert_ids_to_tokens([ids[i] for i in indices]))
    return Span(indices, tokens, chars, len(ids), bos)
