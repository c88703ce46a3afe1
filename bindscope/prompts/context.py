"""Does a prompt, with what is generated or scored after it, fit the model's context window?"""

from __future__ import annotations

from collections.abc import Iterable

from bindscope.errors import PromptTooLongError
from bindscope.prompts.continuations import continuation_ids
from bindscope.prompts.prompt_sets import PromptRecord, first_three
from bindscope.protocols import LanguageModel


def tokens_needed(
    model: LanguageModel, record: PromptRecord, *, prefix: str = "", scored: bool = False
) -> tuple[int, int]:
    """``(prompt tokens, tokens after them)``: new, longest choice or (``scored``) target."""
    n = len(model.tokenize(prefix + record.template))
    target = record.extra.get("target") if scored else None
    if record.task == "generation" and target is None:
        return n, record.max_tokens or 0
    texts = (record.choices or ()) if target is None else (target,)
    return n, max((len(continuation_ids(model.tokenizer, c)) for c in texts), default=0)


def length_problem(
    model: LanguageModel,
    record: PromptRecord,
    *,
    prefix: str = "",
    n_tokens: int | None = None,
    scored: bool = False,
) -> str | None:
    """Why ``record`` does not fit ``model``'s context window (``n_tokens``: prompt only)."""
    limit = getattr(model, "context_length", None)
    if not limit:
        return None
    generated = record.task == "generation" and not (scored and record.extra.get("target"))
    if n_tokens is not None:
        n, after, what = n_tokens, 0, ""
    else:
        n, after = tokens_needed(model, record, prefix=prefix, scored=scored)
        what = " new (max_tokens)" if generated else " answer"
    if n + after <= limit:
        return None
    needed = f"{n} prompt tokens" + (f" + {after}{what} tokens" if after else "")
    return (
        f"prompt {record.key} ({record.source or 'no file'}): {needed} exceed "
        f"{model.name}'s context window of {limit} tokens; shorten the template"
        + (" or lower max_tokens" if generated and after else "")
    )


def check_fit(
    model: LanguageModel,
    records: Iterable,
    *,
    prefixes: dict[str, str] | None = None,
    prompt_only: bool = False,
    scored: bool = False,
) -> None:
    """Refuse prompts (each after its term's ``prefixes``) that do not fit the window."""
    problems = []
    for r in records:
        prefix = (prefixes or {}).get(r.term, "")
        n_tokens = len(model.tokenize(prefix + r.template)) if prompt_only else None
        problem = length_problem(model, r, prefix=prefix, n_tokens=n_tokens, scored=scored)
        if problem:
            problems.append(problem)
    if problems:
        raise PromptTooLongError(
            f"{len(problems)} prompt(s) do not fit the context window: {first_three(problems)}. "
            "`bindscope audit` flags them (too_long)"
        )


__all__ = ["check_fit", "length_problem", "tokens_needed"]
