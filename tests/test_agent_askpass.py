"""The agent's askpass against a real daemon: a step given a credential gets its token through
the package's GIT_ASKPASS program (which asks the daemon over its askpass socket), only for git's
prompts for the credential's base; no other process gets anything, not even one of the same uid
asking while the step runs, and the token is in no step's environment."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from agent_wire import AgentError, Daemon, Wire, output, start_daemon, temp_base
from modal_workspace_core import agent

TOKEN = "ghs_" + "Kq7" * 12
BASE = "https://github.example:8443"
PASSWORD_PROMPT = "Password for 'https://x-access-token@github.example:8443': "
PROMPTS = {
    "Username for 'https://github.example:8443': ": "x-access-token",
    PASSWORD_PROMPT: TOKEN,
}
REFUSED = [
    "Password for 'https://x-access-token@evil.example': ",
    "Password for 'https://x-access-token@github.example:8443.evil.example': ",
    "Password for 'http://x-access-token@github.example:8443': ",
    "Password for 'https://someone@github.example:8443': ",
    "Password for 'https://x-access-token@github.example:8443/octo/hello.git': ",
    "Password for 'https://x-access-token@github.example:8443': extra",
    "Are you sure you want to continue connecting (yes/no)? ",
    "",
]
# Asks each prompt given as an argument, from a grandchild of the step (as git-remote-https
# is), and prints what came back.
ASK_ALL = (
    'for p in "$@"; do out=$(sh -c \'"$GIT_ASKPASS" "$1"\' sh "$p"); echo "rc=$? [$out]"; done'
)


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    for base in temp_base():
        d = start_daemon(base)
        yield d
        d.stop()


def credential_step(argv: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "identity": "agent",
        "argv": argv,
        "env": {"GIT_ASKPASS": str(agent.ASKPASS)},
        "credential": {"base": BASE, "token": TOKEN},
        **extra,
    }


def run_steps(w: Wire, steps: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    exec_id = w.call("exec.start", {"steps": steps})["exec_id"]
    status = w.wait_done(exec_id)
    return status, output(w.read_all(exec_id)).decode()


def test_a_credential_step_gets_the_token_for_its_base_and_nothing_else(daemon: Daemon) -> None:
    w = daemon.wire()
    prompts = [*PROMPTS, *REFUSED]
    status, out = run_steps(w, [credential_step(["sh", "-c", ASK_ALL, "sh", *prompts])])
    assert status["returncode"] == 0, out
    lines = out.splitlines()
    assert lines[: len(PROMPTS)] == [f"rc=0 [{answer}]" for answer in PROMPTS.values()]
    assert lines[len(PROMPTS) :] == ["rc=1 []"] * len(REFUSED)


def test_the_token_is_in_no_environment_of_the_step(daemon: Daemon) -> None:
    w = daemon.wire()
    status, out = run_steps(w, [credential_step(["sh", "-c", "env"])])
    assert status["returncode"] == 0
    assert TOKEN not in out and "MWC_ASKPASS_SOCKET=" in out


def test_a_process_outside_the_step_gets_nothing_even_while_the_step_runs(
    daemon: Daemon,
) -> None:
    w = daemon.wire()
    socket = f"{daemon.socket}.askpass"
    # The credential step holds its token while it sleeps.
    holder = w.call("exec.start", {"steps": [credential_step(["sh", "-c", "sleep 30"])]})["exec_id"]
    env = {"MWC_ASKPASS_SOCKET": socket, "MWC_AGENT_PYTHON": sys.executable}
    # A workspace command, of the same uid as the step here, knowing the socket and the prompt.
    status, out = run_steps(w, [{"argv": [str(agent.ASKPASS), PASSWORD_PROMPT], "env": env}])
    w.call("exec.cancel", {"exec_id": holder})
    assert (status["returncode"], out) == (1, "")


def test_a_credential_is_only_for_an_agent_step_with_a_good_base(daemon: Daemon) -> None:
    w = daemon.wire()
    for step, needle in [
        ({"argv": ["true"], "credential": {"base": BASE, "token": TOKEN}}, "agent step"),
        (credential_step(["true"], credential={"base": "ftp://x", "token": TOKEN}), "base"),
        (credential_step(["true"], credential={"base": BASE, "token": "a\nb"}), "one"),
        (credential_step(["true"], credential={"base": BASE}), "token"),
    ]:
        with pytest.raises(AgentError) as refused:
            w.call("exec.start", {"steps": [step]})
        assert refused.value.code == "invalid_argument", refused.value
        assert needle in str(refused.value), refused.value
        assert TOKEN not in str(refused.value)
