"""Options check themselves from their flags' metadata (``choices``, ``least``) on construction."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bindscope.errors import InputError
from bindscope.experiments.kit import registry
from bindscope.experiments.kit.options import Options, option, positive

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
