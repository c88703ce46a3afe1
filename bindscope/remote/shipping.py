"""What is shipped to NDIF with every request, and the audit of what the sandbox allows."""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterable, Sequence
from typing import Any

from bindscope import nnsight_private
from bindscope.errors import RemoteSandboxError
from bindscope.interventions.trace.records import ShippedModule

# Modules whose source ships by value with every request: the engine and its face. Each
# may import only the sandbox modules below and one another (tests/remote/test_shipping.py
# walks them); their functions refer to one another as globals, pickled by value too.
SHIPPED_MODULES = (
    "bindscope.interventions.ops",
    "bindscope.interventions.trace.records",
    "bindscope.interventions.trace.sites",
    "bindscope.interventions.trace.edits",
    "bindscope.interventions.trace.features",
    "bindscope.interventions.trace.paths",
    "bindscope.interventions.trace.reductions",
    "bindscope.interventions.trace.node_gradients",
    "bindscope.interventions.trace.edge_gradients",
)
# What NDIF's sandbox lets shipped code import (ndif-team/ndif security/whitelist.yaml).
SANDBOX_MODULES = (
    "torch",
    "math",
    "collections",
    "typing",
    "numpy",
    "einops",
    "operator",
    "_operator",
    "enum",
    "time",
    "builtins",
)
_STRICT = {"builtins", "operator", "_operator"}  # the module itself, not submodules
# What the server's unpickler may also resolve: nnsight's own classes and pickle's.
DESERIALIZATION_MODULES = ("nnsight", "cloudpickle", "pickle", "copyreg")


class _ShippableModule(types.ModuleType):
    """A shipped module that pickles as a ``ShippedModule`` of its (and re-exported) members."""

    def __reduce__(self):
        members = {
            key: value
            for key, value in vars(self).items()
            if isinstance(value, (types.FunctionType, type))
            and getattr(value, "__module__", None) in SHIPPED_MODULES
        }
        return (ShippedModule, (self.__name__, members))


def register_shipped() -> None:
    """Register ``SHIPPED_MODULES`` with ``nnsight.register`` (idempotent): they pickle by value."""
    # heavy: loaded on the remote path only, not by `import bindscope` or the CLI's checks
    import nnsight

    for name in SHIPPED_MODULES:
        module = importlib.import_module(name)
        nnsight.register(module)
        if type(module) is types.ModuleType:
            module.__class__ = _ShippableModule


def _allowed(module: str, roots: Iterable[str]) -> bool:
    return any(
        module == root or (root not in _STRICT and module.startswith(root + ".")) for root in roots
    )


def refused(refs: Iterable[tuple[str, str, str]]) -> list[str]:
    """The references in a payload that NDIF's sandbox would refuse, explained."""
    problems = set()
    for kind, module, name in refs:
        why = (
            "bindscope is not installed on the server; call it from "
            "bindscope.interventions.ops, which ships by value"
            if module.split(".")[0] == "bindscope"
            else "not in the sandbox whitelist"
        )
        if kind == "find_class" and not _allowed(module, SANDBOX_MODULES + DESERIALIZATION_MODULES):
            problems.add(f"{module}.{name} (pickled by reference; {why})")
        elif kind == "subimport" and not _allowed(module, SANDBOX_MODULES):
            problems.add(f"module {module} (imported by the server; {why})")
        elif kind == "dynamic_subimport":
            problems.add(f"module object {module} shipped by value (the sandbox refuses it)")
    return sorted(problems)


def audit(nnsight_model: Any, tracer: Any) -> list[str]:
    """Serialize ``tracer`` as a request would and list what the sandbox would refuse."""
    refs: list = []
    blob = nnsight_private.serialize_request(tracer)
    nnsight_private.deserialize_request(blob, nnsight_model, tracer, refs)
    return refused(refs)


def sandbox_error(problems: Sequence[str], where: str) -> RemoteSandboxError:
    """The error for a request the sandbox would refuse (``problems`` from `refused`)."""
    return RemoteSandboxError(
        f"{where}: NDIF's sandbox would refuse this request; it references "
        + "; ".join(problems)
        + ". Trace bodies may call only bindscope.interventions.ops and torch."
    )
