"""What each surface takes, where its clients have limits of their own: GPT Actions (the REST
API) wants a response under 100 000 characters within 45 s, MCP clients give up after about
60 s, the Python API waits as long as it is told. An operation declares, per surface, the most
a field may ask for there and, where it differs, the default there (`Operation.bounds`); the
surface's input model (`surface_model`) validates with those bounds and its schema shows them.

What a response says is fitted to the surface too: `fitting.fit_json` bounds the encoded JSON,
giving less the ways each output declares.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal

import annotated_types
from pydantic import create_model

if TYPE_CHECKING:
    from .fields import Input

__all__ = ["ACTIONS_MAX_CHARS", "ACTIONS_SECONDS", "Bound", "Surface", "surface_model"]

Surface = Literal["actions", "mcp", "python"]

# GPT Actions' limits: a response body of at most this many characters, within this many seconds.
ACTIONS_MAX_CHARS = 100_000
ACTIONS_SECONDS = 45.0


@dataclass(frozen=True)
class Bound:
    """The most a numeric field may ask for on a surface, and its default there (when given)."""

    most: float
    default: float | None = None


Bounds = Mapping[Surface, Mapping[str, Bound]]


def surface_model(model: type[Input], name: str, bounds: Mapping[str, Bound]) -> type[Input]:
    """`model` with `bounds` applied: a subclass, so handlers receive what they expect."""
    return _bounded(model, name, tuple(sorted(bounds.items())))


@cache
def _bounded(model: type[Input], name: str, bounds: tuple[tuple[str, Bound], ...]) -> type[Input]:
    if not bounds:
        return model
    fields = {}
    for field, bound in bounds:
        info = copy.copy(model.model_fields[field])
        # The surface's most replaces the model's own; a looser one would not be a bound.
        metadata = [c for c in info.metadata if not isinstance(c, annotated_types.Le)]
        info.metadata = [*metadata, annotated_types.Le(bound.most)]
        if bound.default is not None:
            info.default = bound.default
        fields[field] = (info.annotation, info)
    return create_model(name, __base__=model, **fields)  # type: ignore[call-overload,no-any-return]
