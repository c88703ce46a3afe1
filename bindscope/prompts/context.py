"""Does a prompt fit the model's context window?

Counted: the prompt tokens plus what is generated or scored after them.
"""

from __future__ import annotations

from collections.abc import Iterable

from bindscope.errors import PromptTooLongError
from bindscope.protocols import LanguageModel


def tokens_needed(model: LanguageModel, record, *, prefix: str = "") -> tuple[int, int]:
    """``(prompt tokens, tokens after them)`` of one record.

    "After" is the new tokens for generation, the longest answer choice for recognition.
    """
    n = len(model.tokenize(prefix + record.template))
    if record.task == "generation":
        return n, record.max_tokens or 0
    choices = record.choices or ()
    after = [len(model.tokenizer(" " + c, add_special_tokens=False)["input_ids"]) for c in choices]
    return n, max(after, default=0)


def length_problem(
    model: LanguageModel, record, *, prefix: str = "", n_tokens: int | None = None
) -> str | None:
    """Why ``record`` does not fit ``model``'s context window.

    None when it fits or the model states no window. With ``n_tokens`` only that many
    prompt tokens are checked.
    """
    limit = getattr(model, "context_length", None)
    if not limit:
        return None
    if n_tokens is not None:
        n, after, what = n_tokens, 0, ""
    else:
        n, after = tokens_needed(model, record, prefix=prefix)
        what = " new (max_tokens)" if record.task == "generation" else " answer"
    if n + after <= limit:
        return None
    needed = f"{n} prompt tokens" + (f" + {after}{what} tokens" if after else "")
    return (
        f"prompt {record.key} ({record.source or 'no file'}): {needed} exceed "
        f"{model.name}'s context window of {limit} tokens; shorten the template"
        + (" or lower max_tokens" if record.task == "generation" and after else "")
    )


def check_fit(
    model: LanguageModel,
    records: Iterable,
    *,
    prefixes: dict[str, str] | None = None,
    prompt_only: bool = False,
) -> None:
    """Refuse prompts that do not fit the context window, naming them.

    Args:
        model: The model whose tokenizer and context length count.
        records: Prompt records.
        prefixes: Optional text put before each term's template (few-shot exemplars).
        prompt_only: Check the template alone (binding reads no generated or answer tokens).

    Raises:
        PromptTooLongError: One or more prompts are too long (the first three named).
    """
    problems = []
    for r in records:
        prefix = (prefixes or {}).get(r.term, "")
        n_tokens = len(model.tokenize(prefix + r.template)) if prompt_only else None
        problem = length_problem(model, r, prefix=prefix, n_tokens=n_tokens)
        if problem:
            problems.append(problem)
    if problems:
        shown = "; ".join(problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        )
        raise PromptTooLongError(
            f"{len(problems)} prompt(s) do not fit the context window: {shown}. "
            "`bindscope audit` flags them (too_long)"
        )


__all__ = ["check_fit", "length_problem", "tokens_needed"]
