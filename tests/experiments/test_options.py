"""Options check themselves from their flags' metadata (``choices``, ``least``) on construction."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bindscope.errors import InputError
from bindscope.experiments.kit import registry
from bindscope.experiments.kit.options import Options, count, option, positive, setting

CHOICES = [
    (definition, name, flag.choices)
    for definition in registry.definitions().values()
    for name, flag, _default in definition.options.flags()
    if flag.choices
]


@pytest.mark.parametrize(
    ("definition", "name", "choices"),
    CHOICES,
    ids=[f"{d.name}.{name}" for d, name, _ in CHOICES],
)
def test_a_value_outside_the_choices_is_refused_before_any_model_loads(definition, name, choices):
    with pytest.raises(InputError, match=f"{name}='nope': pass one of {', '.join(choices)}"):
        definition.options.of({name: "nope"})
    definition.options.of({name: choices[-1]})  # every listed choice is one a run takes


@dataclass(frozen=True)
class _Sized(Options):
    size: int = option(3, "a size", type=positive, least=2)
    cap: int | None = option(None, "a cap", type=positive, least=1)


@pytest.mark.parametrize("bad", [1, 0, -1, 2.5, True, "3"])
def test_least_refuses_what_is_no_whole_number_at_least_it(bad):
    with pytest.raises(InputError, match=f"size={bad!r} is not a whole number >= 2; pass --size 2"):
        _Sized(size=bad)


def test_least_leaves_a_none_default_alone():
    assert _Sized(size=2).cap is None
    with pytest.raises(InputError, match="cap=0 is not a whole number >= 1"):
        _Sized(cap=0)


@dataclass(frozen=True)
class _Conditional(Options):
    width: int = option(0, "a width", type=positive, metavar="W")
    depth: int | None = option(None, "a depth", type=positive, least=1, needs="width")
    rows: int = option(8, "rows", type=positive, least=1, fix="pass e.g. rows=8")
    mode: str = setting("fast", choices=("fast", "slow"))


def test_needs_refuses_a_flag_given_without_the_flag_it_applies_with():
    text = (
        "depth=2 applies only with width (--depth applies only with --width): "
        "leave it out or add width=W (--width W)"
    )
    with pytest.raises(InputError) as refused:
        _Conditional(depth=2)
    assert str(refused.value) == text
    assert _Conditional(depth=2, width=1).depth == 2


@dataclass(frozen=True)
class _Spelled(Options):
    n_layers: int = option(0, "layers", flag="--layers", least=0)
    n_heads: int | None = option(None, "heads", flag="--heads", least=1, needs="n_layers")


def test_the_refusals_write_a_flag_as_the_command_line_does():
    # a flag with a spelling of its own is named by it, as the parser takes it
    with pytest.raises(InputError, match=r"pass --heads 1 or more$"):
        _Spelled(n_layers=1, n_heads=0)
    with pytest.raises(InputError, match=r"\(--heads applies only with --layers\)"):
        _Spelled(n_heads=2)


def test_fix_replaces_the_least_refusals_fix():
    with pytest.raises(InputError, match=r"rows=0 is not a whole number >= 1; pass e.g. rows=8$"):
        _Conditional(rows=0)


def test_a_setting_checks_its_choices():
    with pytest.raises(InputError, match="mode='nope': pass one of fast, slow"):
        _Conditional(mode="nope")
    assert _Conditional(mode="slow").mode == "slow"


def test_least_zero_or_one_gives_the_flag_its_command_line_type():
    types = {name: flag.type for name, flag, _ in _Conditional.flags()}
    assert types == {"width": positive, "depth": positive, "rows": positive}
    at_least = {name: flag.type for name, flag, _ in _Sized.flags()}
    assert at_least == {"size": positive, "cap": positive}  # a given type stays
    assert option(0, "n", least=0).metadata["flag"].type is count
    assert option(0, "n", least=2).metadata["flag"].type is None
