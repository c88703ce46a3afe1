"""An experiment's options: a frozen dataclass whose ``option`` fields are its flags.

``setting`` fields are for Python callers only. A field's ``choices`` and ``least``, then a flag's
``needs``, are checked on construction, then the class's own ``check``, before any model loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from bindscope.batch import GENERATION_BATCH_SIZE
from bindscope.errors import InputError, whole_number

T = TypeVar("T")
OptionsT = TypeVar("OptionsT", bound="Options")


def _integer(text: str, least: int, below: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} {below}")
    return value


#: Flag types: an integer >= 1, an integer >= 0.
positive = functools.partial(_integer, least=1, below="is not a positive integer (1 or more)")
count = functools.partial(_integer, least=0, below="is negative; pass 0 or more")


@dataclass(frozen=True)
class Flag:
    """How one option reads on the command line (``bindscope COMMAND --name VALUE``).

    ``fix`` replaces the ``least`` refusal's fix; ``needs`` names the flag this one applies with.
    """

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
    fix: str | None = None
    needs: str | None = None


def option(default: T, help: str = "", **flag: Any) -> T:
    """An ``Options`` field that is a flag (``Flag`` fields; ``least`` 0 or 1 sets ``type``)."""
    flag.setdefault("type", {0: count, 1: positive}.get(flag.get("least", -1)))
    return dataclasses.field(default=default, metadata={"flag": Flag(help=help, **flag)})


def prompts_option() -> Any:
    """The ``--prompts`` option of a study of one prompt set (default ``canonical``)."""
    return option("canonical", "prompt set: canonical, controls or a .jsonl path", prompts=True)


def generation_batch_option() -> Any:
    """The ``--generation-batch-size`` option of a study that generates."""
    return option(
        GENERATION_BATCH_SIZE,
        "rows per greedy-generation batch (a decoding step costs little more for more rows)",
        least=1,
        fix=f"pass the texts per batch, e.g. generation_batch_size={GENERATION_BATCH_SIZE}",
    )


def spread_option() -> Any:
    """The ``--spread`` switch that goes with ``--limit N``."""
    return option(
        False,
        "with --limit N: take the N prompts in turn from each term (one per term, then a "
        "second, ...) instead of the first N in the file; refused without --limit",
        switch=True,
        needs="limit",
    )


def _check_value(name: str, value: object, flag: Flag) -> None:
    if flag.choices is not None and value not in flag.choices:
        raise InputError(f"{name}={value!r}: pass one of {', '.join(flag.choices)}")
    if flag.least is not None:
        fix = flag.fix or f"pass {spelled(name, flag)} {flag.least} or more"
        whole_number(value, name, fix, least=flag.least)


def spelled(name: str, flag: Flag | None = None) -> str:
    """How option ``name`` is written on the command line (its ``flag``'s own spelling, if any)."""
    return (flag.flag if flag is not None else None) or "--" + name.replace("_", "-")


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
            flag = spelled(name)
            raise InputError(
                f"--preset {preset_name} sets {name}; {flag} {given[name]!r} disagrees: "
                f"drop {flag} or the preset"
            )
        merged[name] = value
    return merged


def setting(default: T, choices: tuple[str, ...] | None = None) -> T:
    """A field of an ``Options`` dataclass that only Python callers set (no flag)."""
    return dataclasses.field(default=default, metadata={"setting": Flag(choices=choices)})


@dataclass(frozen=True)
class Options:
    """An experiment's own options; subclasses are frozen dataclasses of ``option`` fields."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            flag = field.metadata.get("flag") or field.metadata.get("setting")
            if flag is not None and not (value is None and field.default is None):
                _check_value(field.name, value, flag)
        for name, flag, _ in self.flags():
            if flag.needs and getattr(self, name) and not getattr(self, flag.needs):
                raise InputError(self._needs_text(name, flag.needs))
        self.check()

    def _needs_text(self, name: str, needs: str) -> str:
        flags = {n: f for n, f, _ in self.flags()}
        given, other = spelled(name, flags[name]), spelled(needs, flags[needs])
        metavar = flags[needs].metavar or "N"
        return (
            f"{name}={getattr(self, name)!r} applies only with {needs} ({given} applies only "
            f"with {other}): leave it out or add {needs}={metavar} ({other} {metavar})"
        )

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
    "Flag",
    "Options",
    "Preset",
    "apply_preset",
    "count",
    "generation_batch_option",
    "option",
    "positive",
    "prompts_option",
    "setting",
    "spelled",
]
