"""Result types shared by every statistic: an estimate with its interval, a test outcome."""

from __future__ import annotations

from dataclasses import Field, dataclass, fields
from typing import Any, ClassVar, get_type_hints

METHOD_BCA = "bootstrap-bca"
METHOD_PERCENTILE = "bootstrap-percentile"
METHOD_DEGENERATE = "degenerate"
METHOD_WILSON = "wilson"


# Each result class's field types, evaluated once: summaries call to_dict per head.
_DECLARED: dict[type, dict[str, Any]] = {}


class _PlainResult:
    """Base of the result dataclasses: their ``to_dict``."""

    # set by @dataclass on each subclass; declared so that type checkers see a dataclass
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_dict(self) -> dict[str, float | int | str]:
        """The fields converted to their declared types (numpy scalars to plain Python)."""
        cls = type(self)
        if cls not in _DECLARED:
            _DECLARED[cls] = get_type_hints(cls)
        declared = _DECLARED[cls]
        return {f.name: declared[f.name](getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Estimate(_PlainResult):
    """A point estimate with a confidence interval (``method``: docs/internals.md)."""

    value: float
    low: float
    high: float
    confidence: float
    method: str
    n: int


@dataclass(frozen=True)
class TestResult(_PlainResult):
    """The outcome of a hypothesis test or a correlation (``n``: pairs, else the total)."""

    __test__: ClassVar[bool] = False  # not a pytest test class

    statistic: float
    p_value: float
    method: str
    alternative: str
    n: int
