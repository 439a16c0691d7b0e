"""The workspace agent's command lines inside a sandbox: its daemon (the sandbox's entrypoint)
and its `connect` mode (one exec per agent channel), from the driver's settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...config import ModalSettings
from ...policy import WORKSPACE_ROOT

__all__ = ["connect_argv", "daemon_argv"]


def daemon_argv(settings: ModalSettings, redact_env: Sequence[str] = ()) -> tuple[str, ...]:
    """The sandbox's entrypoint. `redact_env` names the variables of the sandbox's environment
    that hold secrets: the agent redacts their values from every exec's output. Names only: the
    values never leave Modal."""
    redact = ("--redact-env", ",".join(redact_env)) if redact_env else ()
    return (
        *settings.agent_command,
        "daemon",
        "--root",
        WORKSPACE_ROOT,
        "--state-dir",
        settings.agent_state_dir,
        "--socket",
        settings.agent_socket,
        # The channel key arrives on stdin (`channel_key.launch_config`).
        "--config",
        "-",
        *redact,
    )


def connect_argv(settings: ModalSettings) -> tuple[str, ...]:
    return (*settings.agent_command, "connect", "--socket", settings.agent_socket)
