"""An experiment's options: a frozen dataclass whose ``option`` fields are its flags.

``setting`` fields are for Python callers only. A flag's ``choices`` and ``least`` are checked
on construction, then the class's own ``check``, before any model loads.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from bindscope.errors import InputError, whole_number

T = TypeVar("T")
OptionsT = TypeVar("OptionsT", bound="Options")

GENERATION_HELP = (
    "rows per greedy-generation batch (a decoding step costs little more for more rows)"
)


def positive(text: str) -> int:
    """Flag type: an integer >= 1."""
    return _integer(text, 1, "is not a positive integer (1 or more)")


def count(text: str) -> int:
    """Flag type: an integer >= 0."""
    return _integer(text, 0, "is negative; pass 0 or more")


def _integer(text: str, least: int, below: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} {below}")
    return value


@dataclass(frozen=True)
class Flag:
    """How one option reads on the command line (``bindscope COMMAND --name VALUE``)."""

    help: str = ""
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    switch: bool = False
    repeat: bool = False
    required: bool = False
    prompts: bool = False
    convert: Callable[[Any], Any] | None = None
    flag: str | None = None
    least: int | None = None


def option(default: T, help: str = "", **flag: Any) -> T:
    """A field of an ``Options`` dataclass that is also a command-line flag (``Flag`` fields)."""
    return dataclasses.field(default=default, metadata={"flag": Flag(help=help, **flag)})


def prompts_option() -> Any:
    """The ``--prompts`` option of a study of one prompt set (default ``canonical``)."""
    return option("canonical", "prompt set: canonical, controls or a .jsonl path", prompts=True)


def spread_option() -> Any:
    """The ``--spread`` switch that goes with ``--limit N``."""
    return option(
        False,
        "with --limit N: take the N prompts in turn from each term (one per term, then a "
        "second, ...) instead of the first N in the file; refused without --limit",
        switch=True,
    )


def check_spread(limit: int | None, spread: bool) -> None:
    """Refuse ``spread`` without a ``limit`` (it would change nothing)."""
    if spread and limit is None:
        raise InputError(
            "--spread spreads --limit N prompts over the terms: add --limit N "
            "(spread=True needs limit=N)"
        )


def check_whole(options: object, least: Mapping[str, int]) -> None:
    """Refuse a field named in ``least`` that is not a whole number of at least its value."""
    for name, at_least in least.items():
        fix = f"pass --{name.replace('_', '-')} {at_least} or more"
        whole_number(getattr(options, name), name, fix, least=at_least)


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    """Refuse a ``value`` of option ``name`` that is not one of ``choices`` (``InputError``)."""
    if value not in choices:
        raise InputError(f"{name}={value!r}: pass one of {', '.join(choices)}")


@dataclass(frozen=True)
class Preset:
    """A named design of an experiment (``bindscope COMMAND --preset NAME``)."""

    help: str
    options: Callable[[], dict[str, Any]]
    models: tuple[str | None, ...] = ()


def apply_preset(
    preset_name: str, preset: Preset, given: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """``given`` with the preset's values where a flag was left at its default."""
    merged = dict(given)
    for name, value in preset.options().items():
        if name in given and given[name] != defaults[name] and given[name] != value:
            flag = "--" + name.replace("_", "-")
            raise InputError(
                f"--preset {preset_name} sets {name}; {flag} {given[name]!r} disagrees: "
                f"drop {flag} or the preset"
            )
        merged[name] = value
    return merged


def setting(default: T) -> T:
    """A field of an ``Options`` dataclass that only Python callers set (no flag)."""
    return dataclasses.field(default=default)


@dataclass(frozen=True)
class Options:
    """An experiment's own options; subclasses are frozen dataclasses of ``option`` fields."""

    def __post_init__(self) -> None:
        for name, flag, default in self.flags():
            value = getattr(self, name)
            if value is None and default is None:
                continue
            if flag.choices is not None:
                check_choice(name, value, flag.choices)
            if flag.least is not None:
                check_whole(self, {name: flag.least})
        self.check()

    def check(self) -> None:
        """Refuse what the flags' metadata cannot say: a bad combination (override; InputError)."""

    @classmethod
    def of(cls: type[OptionsT], given: Mapping[str, Any], typed: Any = None) -> OptionsT:
        """The options from ``run`` keywords (and ``typed`` options), refusing unknown ones."""
        if typed is not None and not isinstance(typed, cls):
            raise InputError(f"run takes {cls.__name__} as its second argument, not {type(typed)}")
        fields = {} if typed is None else typed.keywords()
        both = sorted(set(given) & set(fields))
        if both:
            raise InputError(f"{both} given in the {cls.__name__} and as keywords; pass each once")
        given = {**fields, **given}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise InputError(f"unknown option(s) {unknown}; this experiment takes {sorted(known)}")
        return cls(**given)

    @classmethod
    def flags(cls) -> list[tuple[str, Flag, Any]]:
        """``(field name, flag, default)`` of every command-line option, in field order."""
        return [
            (f.name, f.metadata["flag"], f.default)
            for f in dataclasses.fields(cls)
            if "flag" in f.metadata
        ]

    def keywords(self) -> dict[str, Any]:
        """The options as ``run`` keywords."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


__all__ = [
    "GENERATION_HELP",
    "Flag",
    "Options",
    "Preset",
    "apply_preset",
    "check_choice",
    "check_whole",
    "count",
    "option",
    "positive",
    "prompts_option",
    "setting",
]
