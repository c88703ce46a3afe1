"""Prompt records: load, validate and describe prompt files (JSON Lines)."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from bindscope.errors import PromptFileError, whole_number
from bindscope.prompts.continuations import RULE, strip_stray, whitespace_problems
from bindscope.prompts.datafiles import data_path, load_json
from bindscope.prompts.spans import find_term_chars

__all__ = [
    "BUILTIN_SETS",
    "TASKS",
    "PromptRecord",
    "PromptSet",
    "data_path",
    "json_objects",
    "load",
    "load_json",
    "normal_term",
    "one_spelling",
    "read_jsonl",
    "read_prompt_file",
    "refuse_whitespace",
]

TASKS = ("recognition", "generation")
BUILTIN_SETS = ("canonical", "controls")


@dataclass(frozen=True)
class PromptRecord:
    """One prompt: a term in a template, with a task (fields as in published prompt files).

    ``choices`` and ``answer_idx`` are recognition's, ``max_tokens`` generation's; ``source``
    is the ``file:line`` read, ``extra`` the line's other fields.
    """

    prompt_id: str
    term: str
    task: str
    template: str
    choices: tuple[str, ...] | None = None
    answer_idx: int | None = None
    max_tokens: int | None = None
    control_group: str | None = None
    source: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """``term/prompt_id``, unique within a prompt set."""
        return f"{self.term}/{self.prompt_id}"

    def to_dict(self) -> dict:
        """The record as written in a prompt file."""
        out = {k: getattr(self, k) for k in ("prompt_id", "term", "task", "template")}
        if self.choices is not None:  # the answer goes with the choices, even when None
            out |= {"choices": list(self.choices), "answer_idx": self.answer_idx}
        optional = {"max_tokens": self.max_tokens, "control_group": self.control_group}
        return {**out, **{k: v for k, v in optional.items() if v is not None}, **self.extra}


@dataclass(frozen=True)
class PromptSet:
    """A validated list of records with its name and content hash."""

    name: str
    records: tuple[PromptRecord, ...]
    sha256: str

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def filter(self, *, task: str | None = None, terms: Iterable[str] | None = None) -> PromptSet:
        """Records of one task and/or some terms (same name, hash of the subset)."""
        keep = [
            r
            for r in self.records
            if (task is None or r.task == task) and (terms is None or r.term in set(terms))
        ]
        return self.take(keep)

    def take(self, records: Iterable[PromptRecord]) -> PromptSet:
        """Some of the records, in the order given (same name, hash of the subset)."""
        keep = tuple(records)
        digest = hashlib.sha256("\n".join(r.key for r in keep).encode()).hexdigest()
        return PromptSet(self.name, keep, f"{self.sha256[:16]}:{digest[:16]}")


def load(path_or_name: str | Path, *, check_terms: bool = True) -> PromptSet:
    """Load and validate a prompt file (``canonical``, ``controls`` or a JSON Lines path)."""
    records, name, sha256 = read_prompt_file(
        path_or_name,
        lambda obj, where, spellings: _prompt(obj, where, spellings, check_terms),
        prompts=("template",),
        continuations=("choices", "target"),
    )
    return PromptSet(name, tuple(records), sha256)


def _prompt(
    obj: dict, where: str, spellings: dict[str, tuple[str, str]], check_terms: bool
) -> PromptRecord:
    record = _parse(obj, where)
    one_spelling(spellings, obj["term"], where)
    if check_terms and find_term_chars(record.template, record.term) is None:
        raise PromptFileError(
            f"{where}: field 'template': term {record.term!r} does not occur in its own "
            f"template {record.template!r} (case-insensitive, plural or alias forms count); "
            "fix the template or the term"
        )
    return record


def read_prompt_file(
    path_or_name: str | Path,
    parse: Callable[[dict, str, dict[str, tuple[str, str]]], Any],
    *,
    prompts: tuple[str, ...],
    continuations: tuple[str, ...],
    kind: str = "prompt",
    builtins: tuple[str, ...] = BUILTIN_SETS,
) -> tuple[list[Any], str, str]:
    """A prompt or pair file's records (each line given to ``parse``), set name and SHA-256.

    Keys are unique; ``prompts`` and ``continuations`` name the fields `whitespace_problems` reads.
    """
    path, name, raw = read_jsonl(path_or_name, kind=kind, builtins=builtins)
    records: list[Any] = []
    seen: dict[str, int] = {}
    spellings: dict[str, tuple[str, str]] = {}
    spaced: list[str] = []
    for number, where, obj in json_objects(raw, path):
        record = parse(obj, where, spellings)
        spaced += whitespace_problems(where, obj, prompts=prompts, continuations=continuations)
        if record.key in seen:
            raise PromptFileError(
                f"{where}: {kind} {record.key!r} (term/id) repeats line {seen[record.key]}; "
                "ids must be unique per term"
            )
        seen[record.key] = number
        records.append(record)
    if not records:
        raise PromptFileError(f"{path}: no {kind}s (the file holds no JSON line); docs/records.md")
    refuse_whitespace(path, spaced)
    return records, name, hashlib.sha256(raw).hexdigest()


def normal_term(text: str) -> str:
    """A term as records name it: NFC, no `stray` character at its ends (one term, one key)."""
    return strip_stray(unicodedata.normalize("NFC", text))


def one_spelling(first: dict[str, tuple[str, str]], spelled: str, where: str) -> str:
    """``spelled``'s `normal_term`, refused if ``first`` (updated) holds another spelling."""
    term = normal_term(spelled)
    other, other_where = first.setdefault(term, (spelled, where))
    if other != spelled:
        raise PromptFileError(
            f"{where}: field 'term' is {spelled!a} and {other_where} writes the same term "
            f"as {other!a}; both are {term!r} once normalised (Unicode NFC, no whitespace "
            "or invisible characters at the ends), so one term would be written two ways; "
            "write it the same way on both lines"
        )
    return term


def json_objects(raw: bytes, path: Path) -> Iterator[tuple[int, str, dict]]:
    """Each non-blank line of a JSON Lines file: ``(line number, "file:line", object)``."""
    text = _decode(raw, path)
    # not splitlines, which also cuts at U+2028 and U+0085, which a JSON string may hold
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        obj = _json_line(line, where)
        if not isinstance(obj, dict):
            raise PromptFileError(
                f"{where}: got {_JSON_KINDS.get(type(obj), 'a number')} where a JSON object "
                "({...}) is expected; write one record per line, each an object with its fields"
            )
        yield number, where, obj


# what json.loads gives besides objects; the rest are numbers (int, float)
_JSON_KINDS = {
    type(None): "null",
    bool: "a boolean (true/false)",
    str: "a string",
    list: "an array",
}


def read_jsonl(
    path_or_name: str | Path, *, kind: str = "prompt", builtins: tuple[str, ...] = BUILTIN_SETS
) -> tuple[Path, str, bytes]:
    """A JSON Lines file's path, set name and bytes (a built-in set by its name)."""
    if str(path_or_name) in builtins:
        path, name = data_path(f"{path_or_name}.jsonl"), str(path_or_name)
    else:
        path = Path(path_or_name)
        name = path.stem
    if path.is_dir():
        raise PromptFileError(
            f"{path}: is a folder, not a {kind} file; pass a .jsonl file in it, or one of "
            f"{', '.join(builtins)}"
        )
    if not path.is_file():
        raise PromptFileError(
            f"{path}: no such {kind} file; pass one of {', '.join(builtins)} or a .jsonl path"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PromptFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return path, name, raw


def _json_line(line: str, where: str) -> Any:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        why = (
            f"{exc.msg} at column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else "nested too deep"
        )
        raise PromptFileError(f"{where}: not valid JSON ({why})") from None
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise PromptFileError(
            f"{where}: holds a lone surrogate escape (\\ud800-\\udfff), which is no "
            "character; write the character itself or a valid surrogate pair"
        ) from None
    return obj


def refuse_whitespace(path: Path, problems: list[str]) -> None:
    """Refuse a file whose fields break the whitespace rule (`whitespace_problems`)."""
    if not problems:
        return
    raise PromptFileError(
        f"{path}: {len(problems)} field(s) break the whitespace rule (doubled whitespace, or "
        f"whitespace or invisible characters at an end): {first_three(problems)}. "
        f"{RULE[0].upper()}{RULE[1:]}"
    )


def first_three(problems: list[str]) -> str:
    """The first three ``problems`` joined by ``; ``, and how many more there are."""
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return "; ".join(problems[:3]) + more


def _decode(raw: bytes, path: Path) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise PromptFileError(
            f"{path}:{line}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from None
    return text.removeprefix("\ufeff")


# the fields a line may set; any other key is kept in ``extra``
_KNOWN = {f.name for f in fields(PromptRecord)} - {"source", "extra"}


def _parse(obj: dict, where: str) -> PromptRecord:
    for name in ("prompt_id", "term", "task", "template"):
        if not isinstance(obj.get(name), str) or not obj[name].strip():
            raise PromptFileError(f"{where}: field {name!r} is missing or not a non-empty string")
    term = normal_term(obj["term"])
    if not term:
        raise PromptFileError(
            f"{where}: field 'term' is {obj['term']!r}: only whitespace or invisible "
            "characters; write the term itself"
        )
    # keys join term and id ("term/prompt_id"), result keys join fields with "|": an id
    # with "/" or "|", or a term with "|", could make two prompts share one key
    for name, banned in (("prompt_id", "/|"), ("term", "|")):
        found = [c for c in banned if c in obj[name]]
        if found:
            raise PromptFileError(
                f"{where}: field {name!r} is {obj[name]!r}; it may not contain "
                f"{' or '.join(repr(c) for c in found)}, which joins the parts of record keys "
                f"({'term/prompt_id' if name == 'prompt_id' else 'result keys'}); "
                "rename it, e.g. with '_' or '-'"
            )
    task = obj["task"]
    if task not in TASKS:
        raise PromptFileError(f"{where}: field 'task': unknown task {task!r}; use one of {TASKS}")
    choices = answer_idx = max_tokens = None
    if task == "recognition":
        choices, answer_idx = _choices(obj, where)
    else:
        max_tokens = _max_tokens(obj, where)
    _check_optional(obj, where)
    pid, template, group = obj["prompt_id"], obj["template"], obj.get("control_group")
    extra = {k: v for k, v in obj.items() if k not in _KNOWN}
    return PromptRecord(
        pid, term, task, template, choices, answer_idx, max_tokens, group, where, extra
    )


def _choices(obj: dict, where: str) -> tuple[tuple[str, ...], int]:
    choices = obj.get("choices")
    if (
        not isinstance(choices, list)
        or len(choices) < 2
        or not all(isinstance(c, str) and c.strip() for c in choices)
    ):
        raise PromptFileError(f"{where}: field 'choices' must be a list of 2+ non-empty strings")
    answer_idx = whole_number(
        obj.get("answer_idx"),
        f"{where}: field answer_idx",
        "give the index of the right choice, counted from 0",
        least=0,
        below=len(choices),
        error=PromptFileError,
    )
    return tuple(choices), answer_idx


def _max_tokens(obj: dict, where: str) -> int:
    fix = "generation records need a new-token budget, e.g. 20"
    name = f"{where}: field max_tokens"
    return whole_number(obj.get("max_tokens"), name, fix, least=1, error=PromptFileError)


def _check_optional(obj: dict, where: str) -> None:
    group = obj.get("control_group")
    if group is not None and not isinstance(group, str):
        raise PromptFileError(f"{where}: field 'control_group' must be a string")
    target = obj.get("target")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        raise PromptFileError(
            f"{where}: field 'target' is {target!r}; it must be a non-empty string (the text "
            "scored after the prompt), or left out"
        )
