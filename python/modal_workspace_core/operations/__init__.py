"""The operations, by domain: each module declares its inputs, outputs and handlers, every
operation at its handler (`machinery.table.Declarations`). `OPERATIONS` is their concatenation,
in the order the surfaces list them."""

from __future__ import annotations

from ..config import Settings
from ..errors import InvalidArgumentError
from . import (
    artifacts,
    execs,
    experiment_page,
    experiments,
    file_patch,
    files,
    functions,
    metrics,
    previews,
    repo,
    snapshots,
    streams,
    templates,
    terminal,
    watches,
    workspaces,
)
from .hooks import new_service, open_service
from .machinery.run import call, parse_input, parse_request, run
from .machinery.table import Hints, Operation

__all__ = [
    "OPERATIONS",
    "Hints",
    "Operation",
    "actions_operations",
    "call",
    "new_service",
    "offered",
    "open_service",
    "operation",
    "parse_input",
    "parse_request",
    "run",
]

OPERATIONS: tuple[Operation, ...] = tuple(
    op
    for domain in (
        workspaces,
        previews,
        snapshots,
        templates,
        execs,
        terminal,
        experiments,
        experiment_page,
        *repo.JOBS,
        files,
        file_patch,
        artifacts,
        watches,
        streams,
        metrics,
        functions,
    )
    for op in domain.declare.operations
)
_BY_NAME = {op.name: op for op in OPERATIONS}


# The most operations GPT Actions accepts in one schema.
MAX_ACTIONS_OPERATIONS = 30


def offered(settings: Settings) -> tuple[Operation, ...]:
    """The operations a surface lists for a gateway with `settings`: the function operations
    only when functions are allowlisted (they refuse, naming the setting, when called anyway)."""
    function_ops = {op.name for op in functions.declare.operations}
    return tuple(
        op for op in OPERATIONS if settings.allowed_functions or op.name not in function_ops
    )


def actions_operations(settings: Settings) -> frozenset[str]:
    """The names in the GPT Actions schema: those marked `in_actions`; with the functions turned
    on there (MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS), the functions' in and the file watches out
    (`functions.ACTIONS_SWAP`), so the schema stays within Actions' limit."""
    names = {op.name for op in OPERATIONS if op.in_actions}
    if settings.functions_in_actions and settings.allowed_functions:
        names = (names - set(functions.ACTIONS_SWAP.values())) | set(functions.ACTIONS_SWAP)
    if len(names) > MAX_ACTIONS_OPERATIONS:
        raise RuntimeError(
            f"{len(names)} operations for GPT Actions, over its {MAX_ACTIONS_OPERATIONS}"
        )
    return frozenset(names)


def operation(name: str) -> Operation:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown operation {name[:64]!r}") from None
