"""Locate a term in a text by characters, then map it to tokens with offsets."""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from bindscope.errors import SpanNotFoundError
from bindscope.prompts.datafiles import data_path, load_json
from bindscope.protocols import LanguageModel


@functools.lru_cache(maxsize=1)
def aliases() -> dict[str, tuple[str, ...]]:
    """The alias table shipped with the package (``data/aliases.json``)."""
    if not data_path("aliases.json").is_file():
        return {"alt text": ("alternative text",)}
    return {k: tuple(v) for k, v in load_json("aliases.json")["aliases"].items()}


# Scripts written without spaces between words, where a term may touch other letters
# ("読み上げソフトは"); Hangul is here because Korean attaches particles to the word before.
_UNSPACED = re.compile(
    "["
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"  # Hangul
    "\u1780-\u17ff"  # Khmer
    "\u3005-\u3007\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"  # kana, iteration marks
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"  # CJK ideographs
    "]"
)


def _unspaced(char: str) -> bool:
    return _UNSPACED.match(char) is not None


def _mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


def _continues_word(char: str) -> bool:
    if char == "-":
        return True
    if _unspaced(char):
        return False
    return char.isalnum() or char == "_" or _mark(char)


@functools.lru_cache(maxsize=4096)
def _pattern(form: str) -> re.Pattern:
    words = [re.escape(w) for w in form.split()]
    if not _unspaced(form[-1]):
        words[-1] += r"(?:s|es)?"  # plural of the last word
    return re.compile(r"[\s-]+".join(words), re.IGNORECASE)


def _bounded(text: str, start: int, end: int) -> bool:
    # Only an edge in a spaced script needs a boundary: "skip linked" does not hold "skip
    # link", "読み上げソフトは" holds "読み上げソフト", and so does "使用screen reader时". A
    # letter is never split from its combining marks, in any script.
    if start > 0 and (
        _mark(text[start]) or (not _unspaced(text[start]) and _continues_word(text[start - 1]))
    ):
        return False
    return not (
        end < len(text)
        and (_mark(text[end]) or (not _unspaced(text[end - 1]) and _continues_word(text[end])))
    )


def _search(form: str, text: str) -> tuple[int, int] | None:
    pattern, position = _pattern(form), 0
    while match := pattern.search(text, position):
        if _bounded(text, match.start(), match.end()):
            return match.start(), match.end()
        position = match.start() + 1
    return None


def find_forms(text: str, forms: Iterable[str]) -> tuple[int, int] | None:
    """Character span ``[start, end)`` of the earliest, then longest, match of any of ``forms``.

    Case-insensitive and NFC-normalised, words joined by spaces or hyphens, an optional
    plural on the last word, word-bounded where the script spaces its words.
    """
    normal, lengths = unicodedata.normalize("NFC", text), None
    if normal != text:  # for each NFC prefix length, the original one
        lengths = [len(unicodedata.normalize("NFC", text[:i])) for i in range(len(text) + 1)]
    best = None
    for form in filter(str.strip, forms):
        found = _search(unicodedata.normalize("NFC", form.strip()), normal)
        if found and (best is None or (found[0], -found[1]) < (best[0], -best[1])):
            best = found
    if best is None or lengths is None:
        return best
    # Back to the caller's characters: the last original prefix of each NFC length.
    return bisect.bisect_right(lengths, best[0]) - 1, bisect.bisect_right(lengths, best[1]) - 1


def find_term_chars(
    text: str, term: str, extra_aliases: Iterable[str] = ()
) -> tuple[int, int] | None:
    """Character span ``[start, end)`` of the first occurrence of the term or an alias."""
    return find_forms(text, (term, *aliases().get(term.lower(), ()), *extra_aliases))


@dataclass(frozen=True)
class Span:
    """Where a term sits in a tokenized prompt (``bos``: whether position 0 is BOS)."""

    indices: tuple[int, ...]
    tokens: tuple[str, ...]
    chars: tuple[int, int]
    n_tokens: int
    bos: bool

    @property
    def flags(self) -> tuple[str, ...]:
        """Audit flags: single_token, at_position_0 (the attention sink), bos."""
        at_0 = bool(self.indices) and self.indices[0] == 0
        found = {"single_token": len(self.indices) < 2, "at_position_0": at_0, "bos": self.bos}
        return tuple(name for name, hit in found.items() if hit)


def locate(model: LanguageModel, text: str, term: str, *, prompt_id: str = "?") -> Span:
    """Find the term's token span in ``text`` as ``model`` tokenizes it."""
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
