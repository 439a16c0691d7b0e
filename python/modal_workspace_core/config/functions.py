"""The deployed Modal Functions agents may call (`APP/FUNCTION,…`; empty: the function
operations are off), and whether those operations enter the GPT Actions schema
(`operations/functions.py`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..errors import core_refusal
from ..policy import function_allowlist
from .reading import ConfigError, Environ, read_flag, setting_error

__all__ = [
    "ALLOWED_FUNCTIONS_ENV",
    "FUNCTIONS_IN_ACTIONS_ENV",
    "FunctionSettings",
    "read_functions",
]

ALLOWED_FUNCTIONS_ENV = "MODAL_WORKSPACE_ALLOWED_FUNCTIONS"
FUNCTIONS_IN_ACTIONS_ENV = "MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS"


class FunctionSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    # The deployed functions agents may call, as `app/function`; empty: the operations are off.
    allowed_functions: tuple[str, ...] = ()
    functions_in_actions: bool = False


def read_functions(env: Environ) -> FunctionSettings:
    with core_refusal(ALLOWED_FUNCTIONS_ENV, error=setting_error):
        allowed = tuple(function_allowlist(env.get(ALLOWED_FUNCTIONS_ENV, "")))
    in_actions = read_flag(env, FUNCTIONS_IN_ACTIONS_ENV)
    if in_actions and not allowed:
        raise ConfigError(
            f"{FUNCTIONS_IN_ACTIONS_ENV} is set but {ALLOWED_FUNCTIONS_ENV} is empty: list the "
            "functions (APP/FUNCTION) agents may call, or unset it"
        )
    return FunctionSettings(allowed_functions=allowed, functions_in_actions=in_actions)
