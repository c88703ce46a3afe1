"""One whitespace convention for every text scored after a prompt.

A *continuation* is text appended after a prompt and scored there: a recognition item's
``choices``, a prompt's ``target`` (the scan), a pair file's ``target``, ``clean_answer``
and ``corrupted_answer``. Every file kind follows one rule: write a continuation without
leading whitespace and its prompt without trailing whitespace; bindscope puts exactly one
space (``SEPARATOR``) between them. ``"Answer:"`` and ``"True"`` are read as
``"Answer: True"``; a choice written ``" True"`` would be read with two spaces, a word the
model has rarely seen, and its score would measure that instead. Loaders refuse such a
record (`whitespace_problems`), naming the file, line and field.
"""

from __future__ import annotations

from typing import Any

#: What goes between a prompt and each of its continuations.
SEPARATOR = " "

#: The rule, as refusals and the docs state it.
RULE = (
    "bindscope puts one space between a prompt and each choice, target or answer, so write "
    "them without leading whitespace and the prompt without trailing whitespace "
    "(docs/records.md, 'Whitespace')"
)


def appended(text: str) -> str:
    """A continuation as it follows its prompt: ``SEPARATOR + text``."""
    return SEPARATOR + text


def continuation_ids(tokenizer: Any, text: str) -> list[int]:
    """The token ids of a continuation as it follows its prompt (tokenized on its own)."""
    return tokenizer(appended(text), add_special_tokens=False)["input_ids"]


def whitespace_problems(
    where: str, row: dict, *, prompts: tuple[str, ...], continuations: tuple[str, ...]
) -> list[str]:
    """What in one record would be read with doubled whitespace, one message per field.

    Args:
        where: ``file:line`` of the record.
        row: The record as read (fields not present, or not strings, are skipped: their
            own checks name them).
        prompts: Fields holding a prompt that continuations follow (``template``,
            ``clean``, ``corrupted``).
        continuations: Fields holding a continuation or a list of them (``choices``).
    """
    found = []
    present = [name for name in continuations if row.get(name) is not None]
    for name in present:
        values = row[name] if isinstance(row[name], list) else [row[name]]
        for i, value in enumerate(values):
            if isinstance(value, str) and value[:1].isspace():
                field = f"{name!r}[{i}]" if isinstance(row[name], list) else repr(name)
                found.append(
                    f"{where}: field {field} is {value!r}, which starts with whitespace: it "
                    f"would be read as {appended(value)!r} after the prompt; write "
                    f"{value.lstrip()!r}"
                )
    for name in prompts if present else ():
        value = row.get(name)
        if isinstance(value, str) and value[-1:].isspace():
            found.append(
                f"{where}: field {name!r} ends with whitespace ({value[-12:]!r}): its "
                f"{' and '.join(present)} would follow it after one more space; remove it"
            )
    return found


__all__ = ["RULE", "SEPARATOR", "appended", "continuation_ids", "whitespace_problems"]
