"""One whitespace rule for every text scored after a prompt: exactly ``SEPARATOR`` between."""

from __future__ import annotations

import unicodedata
from typing import Any

SEPARATOR = " "

RULE = (
    "bindscope puts one space between a prompt and each choice, target or answer, so write "
    "them without whitespace or invisible characters (such as U+200B, U+FEFF) at either end "
    "and the prompt without any at its end (docs/records.md, 'Whitespace')"
)


def stray(char: str) -> bool:
    """Whether ``char`` is whitespace or an invisible format character."""
    return char.isspace() or unicodedata.category(char) in ("Zs", "Cf")


def strip_stray(text: str) -> str:
    """``text`` without the `stray` characters at either end."""
    kept = [i for i, char in enumerate(text) if not stray(char)]
    return text[kept[0] : kept[-1] + 1] if kept else ""


def _kind(char: str) -> str:
    what = "whitespace" if char.isspace() else "an invisible format character"
    return f"{what} (U+{ord(char):04X} {unicodedata.name(char, '(a control character)')})"


def appended(text: str) -> str:
    """A continuation as it follows its prompt: ``SEPARATOR + text``."""
    return SEPARATOR + text


def continuation_ids(tokenizer: Any, text: str) -> list[int]:
    """The token ids of a continuation as it follows its prompt (tokenized on its own)."""
    return tokenizer(appended(text), add_special_tokens=False)["input_ids"]


def whitespace_problems(
    where: str, row: dict, *, prompts: tuple[str, ...], continuations: tuple[str, ...]
) -> list[str]:
    """What in the record ``row`` (read at ``where``) breaks the rule, one message per field."""
    found = []
    present = [name for name in continuations if row.get(name) is not None]
    for name in present:
        values = row[name] if isinstance(row[name], list) else [row[name]]
        for i, value in enumerate(values):
            field = f"{name!r}[{i}]" if isinstance(row[name], list) else repr(name)
            if isinstance(value, str) and (problem := _continuation_problem(value)):
                found.append(f"{where}: field {field} is {value!r}, which {problem}")
    for name in prompts if present else ():
        value = row.get(name)
        if isinstance(value, str) and value[-1:] and stray(value[-1]):
            found.append(
                f"{where}: field {name!r} ends with {_kind(value[-1])}, in {value[-12:]!r}: "
                f"its {' and '.join(present)} would be read after it and one more space; "
                "remove it"
            )
    return found


def _continuation_problem(value: str) -> str | None:
    fix = f"write {strip_stray(value)!r}"
    if value[:1] and stray(value[0]):
        return (
            f"starts with {_kind(value[0])}: it would be read as {appended(value)!r} after the "
            f"prompt; {fix}"
        )
    if value[-1:] and stray(value[-1]):
        return f"ends with {_kind(value[-1])}: the model would score it too; {fix}"
    return None


__all__ = [
    "RULE",
    "SEPARATOR",
    "appended",
    "continuation_ids",
    "stray",
    "strip_stray",
    "whitespace_problems",
]
