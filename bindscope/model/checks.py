"""Argument checks and error translation for ``Model``, kept apart from the class."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from bindscope.errors import (
    HeadSpecError,
    InterventionOrderError,
    UnsupportedModelError,
    whole_number,
)
from bindscope.families import SITE_NAMES, Family
from bindscope.protocols import TraceTarget


def check_layers(model: TraceTarget, layers: Iterable[int] | None) -> list[int]:
    """Validate layer indices (None: all) and return them sorted (raises ``HeadSpecError``)."""
    n_layers, model_name = model.n_layers, model.name
    if layers is None:
        return list(range(n_layers))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise HeadSpecError(
            f"{model_name}: layers={layers!r} is not a list of layer indices; pass e.g. "
            "layers=[0, 2], or None for every layer"
        )
    wanted = list(layers)
    if not wanted:
        raise HeadSpecError(
            f"{model_name}: layers=[] selects no layer; pass at least one index in "
            f"0..{n_layers - 1}, or layers=None for every layer"
        )
    name, fix = f"{model_name}: layer", "pass layer indices of the model"
    for layer in wanted:
        whole_number(layer, name, fix, least=0, below=n_layers, error=HeadSpecError)
    return sorted({int(layer) for layer in wanted})


def _past_first_step() -> bool:
    try:
        # nnsight's own dependency, imported only inside its worker threads
        from greenlet import getcurrent

        return getcurrent().mediator().iteration != 0
    except Exception:  # not inside an nnsight worker: nothing to protect
        return False


def order_error(model: TraceTarget, exc: Exception) -> Exception | None:
    """Nnsight's ``OutOfOrderError`` as an ``InterventionOrderError`` (None: leave it).

    At a generation step past the first, nnsight throws the same error to end an open
    ``tracer.all()`` loop and expects it back unchanged, so only step 0 is translated.
    """
    if type(exc).__name__ != "OutOfOrderError" or _past_first_step():
        return None
    # nnsight names the site: 'model.model.layers.0.self_attn.o_proj.input.i0' (Llama)
    ablated = ".".join(part for part in model.sites["head_out"][:2] if part)
    site = str(exc).split("'")[1] if str(exc).count("'") >= 2 else ""
    found = re.search(r"layers\.(\d+)\.", site)
    layer = found.group(1) if found else "?"
    what = (
        "an ablation (run_layers(plan=...) / mean_ablate)"
        if f".{ablated}." in f"{site}."
        else "a capture (capture_probs)"
    )
    return InterventionOrderError(
        f"{model.name}: {what} of layer {layer} came after the trace had already run past "
        f"layer {layer}. Call the primitives in execution order, earlier layers before later "
        "ones and a layer's ablation before its capture, or pass both to one "
        "run_layers(model, capture=..., plan=...) call, which orders them for you"
    )


def check_sites(envoy: Any, family: Family, *, model_name: str) -> dict[str, tuple[str, str, int]]:
    """``{site: (module, port, index)}`` of the family row that every decoder layer has."""
    found: dict[str, tuple[str, str, int]] = {}
    for name in SITE_NAMES:
        at = family.sites.get(name)
        missing = None if at is None else _missing_layer(envoy, at.module)
        if at is None or (missing is not None and name == "mlp_post"):
            continue
        if missing is not None:
            raise UnsupportedModelError(
                f"{model_name} ({family.name}): the family row puts site {name!r} at "
                f"model.layers[{missing}].{at.module}, which the model does not have; "
                "fix the row's sites=Sites(...) (paths are in the renamed layout)"
            )
        found[name] = (at.module, at.port, at.index)
    return found


def _descend(module: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        module = getattr(module, part, None)
    return module


def _missing_layer(envoy: Any, path: str) -> int | None:
    layers = enumerate(envoy.model.layers)
    return next((i for i, layer in layers if _descend(layer, path) is None), None)


def attention_scaling(
    envoy: Any, sites: dict[str, tuple[str, str, int]]
) -> tuple[float | None, ...]:
    """Each layer's q.k scale (None: none), read here as GPT-2's eager path takes none."""
    found = []
    for layer in envoy.model.layers:
        attention = _descend(layer, sites["pattern"][0])
        scaling = getattr(getattr(attention, "_module", attention), "scaling", None)
        found.append(None if scaling is None else float(scaling))
    return tuple(found)
