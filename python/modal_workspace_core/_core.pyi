"""Type stubs for the compiled core, `modal_workspace_core._core`. Kept in step with `src/`."""

__version__: str

class PolicyError(ValueError):
    """An input was refused by a policy.

    The message says what was wrong and quotes at most a short prefix of the input; `rule` is a
    stable name of the rule that failed (for example `"ref.double-dot"`).
    """

    rule: str
