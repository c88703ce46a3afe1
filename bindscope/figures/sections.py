"""Every figure module's ``SECTION``, found where it stands: what figures and the report read."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys

from bindscope.figures.section import Section


@functools.cache
def sections() -> dict[str, Section]:
    """Every section by experiment, in report order."""
    names = (info.name for info in pkgutil.iter_modules(sys.modules[__package__].__path__))
    modules = (importlib.import_module(f"{__package__}.{name}") for name in names)
    found = [s for m in modules if isinstance(s := getattr(m, "SECTION", None), Section)]
    return {s.experiment: s for s in sorted(found, key=lambda s: (s.order, s.experiment))}


def sizes() -> dict[str, tuple[float, float]]:
    """Inches of every figure kind of every section."""
    return {kind: size for s in sections().values() for kind, size in s.sizes.items()}


__all__ = ["sections", "sizes"]
