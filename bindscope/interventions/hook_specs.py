"""``Hook`` (TransformerLens's ``run_with_hooks``) and ``Patchscope`` (nnterp, PAIR) specs."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bindscope.batch import absolute_positions
from bindscope.errors import InterventionError
from bindscope.families import HEAD_SITES
from bindscope.interventions.rowops import HookOp, ReplaceOp, RowOp
from bindscope.interventions.specs import (
    RowContext,
    _check_site,
    _check_source_count,
    _integer,
    _known_site,
    _layer_list,
    every_unit,
)

RESIDUAL = ("resid_pre", "resid_mid", "resid_post")


@dataclass(frozen=True, eq=False)
class Hook:
    """Call ``fn`` on a site's activations at ``layer`` (an int or a list), every position.

    ``fn(x)`` gets each text's unpadded ``[1, n, d]`` (``[1, n, U, hd]`` at head sites; each
    new token's ``[1, 1, ...]`` in ``generate``) and returns that shape, or None after editing
    in place. Local models only: a Python function cannot be shipped to NDIF's sandbox.
    """

    site: str
    layer: Any
    fn: Callable[[torch.Tensor], torch.Tensor | None]

    def __post_init__(self) -> None:
        _known_site("Hook", self.site)
        if not callable(self.fn):
            raise InterventionError(
                f"Hook: fn={self.fn!r} is not a function; pass e.g. lambda x: x * 0.5"
            )
        object.__setattr__(self, "layer", _layer_list(self.layer, "Hook"))
        object.__setattr__(self, "_checked", _checked(self.fn, self.describe()))

    def describe(self) -> str:
        """A short form for messages."""
        return f"Hook({self.site!r}, layer={list(self.layer)!r})"

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model; its row op for text ``i``."""
        model = ctx.model
        if getattr(model, "remote", False):
            raise InterventionError(
                f"{model.name}: {self.describe()}: a Python function cannot be shipped to NDIF's "
                "sandbox; use a spec (Steer, Zero, Mean, Patch) or your own model.nnsight.trace"
            )
        _check_site(model, self.site, self.describe())
        cells = every_unit(model, self.site, self.layer)
        fn = self.__dict__["_checked"]
        heads = self.site in HEAD_SITES  # [1, n, U, hd]; else [1, n, d]
        return (HookOp(self.describe(), self.site, cells, None, fn, heads),)


def _checked(fn: Callable, spec: str) -> Callable[[torch.Tensor], Any]:
    """``fn`` with its return value checked: None, or a tensor of the shape it was given."""

    def call(x: torch.Tensor) -> Any:
        new = fn(x)
        if new is not None and (not isinstance(new, torch.Tensor) or new.shape != x.shape):
            got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
            raise InterventionError(
                f"{spec}: the function returned {got}, not a tensor of the shape it was given "
                f"{tuple(x.shape)}; return the edited tensor, or None after editing it in place"
            )
        return new

    return call


@dataclass(frozen=True, eq=False)
class Patchscope:
    """Write ``source``'s hidden state at (``position``, ``layer``) into each text.

    Read from a clean run of ``source`` at a residual-stream ``site``; written at
    (``target_position``, ``target_layer``, default the same layer). Negative positions count
    from the end; in ``generate`` it acts on the prompt pass.
    """

    source: Any
    layer: int
    position: int = -1
    target_layer: int | None = field(default=None, kw_only=True)
    target_position: int = field(default=-1, kw_only=True)
    site: str = field(default="resid_post", kw_only=True)

    def __post_init__(self) -> None:
        source = self.source
        one = isinstance(source, str) or (
            bool(source) and isinstance(source[0], numbers.Integral)
        )  # a text, or one text's token ids
        object.__setattr__(self, "source", (source,) if one else tuple(source))
        if self.site not in RESIDUAL:
            raise InterventionError(
                f"Patchscope: site={self.site!r}; a hidden state is read and written at a "
                f"residual-stream site: {', '.join(RESIDUAL)}"
            )
        if self.target_layer is None:  # checked as layer (first) when it is layer
            object.__setattr__(self, "target_layer", self.layer)
        for name in ("layer", "position", "target_position", "target_layer"):
            value = getattr(self, name)
            object.__setattr__(self, name, _integer(value, f"Patchscope {name}", value))

    def describe(self) -> str:
        """A short form for messages."""
        return (
            f"Patchscope({self.site!r}, layer {self.layer} position {self.position} -> "
            f"layer {self.target_layer} position {self.target_position})"
        )

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row op for that text."""
        model, layer = ctx.model, int(self.target_layer or 0)  # set in __post_init__
        _check_site(model, self.site, self.describe())
        model.check_layers([self.layer, layer])
        _check_source_count(ctx, "Patchscope", self.source)
        state = self._states(ctx)[0 if len(self.source) == 1 else i]  # [d_model]
        n = ctx.length(i)
        (where,) = absolute_positions(
            (self.target_position,), n, model_name=model.name, text=f"text #{i}"
        )
        values = {layer: state.view(1, -1)}
        cells = ((layer, (0,)),)
        return (ReplaceOp(self.describe(), self.site, cells, (where,), values),)

    def _states(self, ctx: RowContext) -> list[torch.Tensor]:
        """Each source's hidden state (one clean capture per call, kept in ``ctx``)."""
        if id(self) not in ctx.drawn:
            model = ctx.model
            for k, text in enumerate(self.source):
                n = len(ctx.ids(text))
                absolute_positions((self.position,), n, model_name=model.name, text=f"source #{k}")
            got = model.capture(list(self.source), sites=[self.site], layers=[self.layer])
            ctx.drawn[id(self)] = tuple(
                found[self.site][self.layer][self.position] for found in got
            )
        return list(ctx.drawn[id(self)])
