"""bindscope: attention-head interventions on nnsight, with EB* and causal head ablation."""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from bindscope._version import __version__
from bindscope.errors import BindscopeError

# every module and subpackage, imported when first asked for
SUBPACKAGES = tuple(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
_ATTRIBUTES = {
    "Cache": "bindscope.model.cache",
    "load_model": "bindscope.loading",
    "Model": "bindscope.model",
    "view": "bindscope.viewer",
}

if TYPE_CHECKING:
    from bindscope.loading import load_model
    from bindscope.model import Model
    from bindscope.model.cache import Cache
    from bindscope.viewer import view


def __getattr__(name: str):
    """Import ``load_model``, ``Model``, ``Cache`` and the subpackages when first asked for."""
    if name in _ATTRIBUTES:
        value = getattr(importlib.import_module(_ATTRIBUTES[name]), name)
    elif name in SUBPACKAGES:
        value = importlib.import_module(f"bindscope.{name}")
    else:
        raise AttributeError(f"module 'bindscope' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_ATTRIBUTES, *SUBPACKAGES])


__all__ = ["BindscopeError", "Cache", "Model", "__version__", "load_model", "view"]
