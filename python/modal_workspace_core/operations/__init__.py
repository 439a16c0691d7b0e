"""The operations, by domain: each module declares its inputs, outputs and handlers, every
operation at its handler (`table.Declarations`). `OPERATIONS` is their concatenation, in the
order the surfaces list them."""

from __future__ import annotations

from ..errors import InvalidArgumentError
from ..git.pending import resume_pending
from ..service import Service
from . import execs, files, repo, snapshots, streams, watches, workspaces
from .lifecycle import resume_suspended
from .run import call, parse_input, parse_request, run
from .table import Hints, Operation

__all__ = [
    "OPERATIONS",
    "Hints",
    "Operation",
    "call",
    "operation",
    "parse_input",
    "parse_request",
    "run",
]

OPERATIONS: tuple[Operation, ...] = tuple(
    op
    for domain in (workspaces, snapshots, execs, repo, files, watches, streams)
    for op in domain.declare.operations
)
_BY_NAME = {op.name: op for op in OPERATIONS}

# Work owed to a workspace whenever this process first reaches its agent: repo bookkeeping a
# restarted gateway left unfinished.
Service.on_first_connect = (resume_pending,)
# A suspended workspace resumes when an operation needs it.
Service.resume_suspended = resume_suspended


def operation(name: str) -> Operation:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown operation {name[:64]!r}") from None
