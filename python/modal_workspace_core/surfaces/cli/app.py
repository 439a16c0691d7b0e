"""The `modal-workspace` command line: each command's arguments, options and one line of help.

What each command does lives in the modules it names, imported when it runs: `--help` and shell
completion (which runs this program at every Tab) load none of the operations, the drivers or
the server.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ... import __version__
from .contract import Target
from .tokens import mint_token

__all__ = ["app"]

app = typer.Typer(
    name="modal-workspace",
    help="Remote workspaces for AI agents: run the gateway, or drive workspaces from a terminal.",
    epilog=(
        "Commands reach the gateway at --url (or MODAL_WORKSPACE_URL) with the token in "
        "MODAL_WORKSPACE_TOKEN or a file; without a URL they run in process on this machine's "
        "local driver, on the data root `serve` uses."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Paragraphs of a command's help are wrapped to the terminal, not to the source's lines.
    rich_markup_mode="markdown",
)

Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
WorkspaceId = Annotated[str, typer.Argument(help="The workspace: ws-…", show_default=False)]


def _version(shown: bool) -> None:
    if shown:
        typer.echo(f"modal-workspace {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            help="The gateway to call (default: MODAL_WORKSPACE_URL; neither: run in process).",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="A file holding the gateway's token (default: MODAL_WORKSPACE_TOKEN, else "
            "MODAL_WORKSPACE_TOKEN_FILE). Never the token itself on the command line.",
            show_default=False,
        ),
    ] = None,
    data_root: Annotated[
        Path | None,
        typer.Option(
            help="In process: where the local driver keeps workspaces (default: as serve).",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    ctx.obj = Target(url=url, token_file=token_file, data_root=data_root)


def _target(ctx: typer.Context) -> Target:
    target = ctx.find_root().obj
    return target if isinstance(target, Target) else Target()


def _done(status: int) -> None:
    raise typer.Exit(status)


# --- the server ----------------------------------------------------------------------------------


@app.command(
    help="Run the gateway (REST, GPT Actions, MCP) on this machine. Bearer tokens come from "
    "MODAL_WORKSPACE_MCP_TOKEN (comma-separated) or MODAL_WORKSPACE_MCP_TOKEN_FILE; without one, "
    "the server runs only on loopback with the local driver and mints a token for the run.",
    short_help="Run the gateway (REST, GPT Actions, MCP) on this machine.",
)
def serve(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8000,
    driver: Annotated[
        str | None,
        typer.Option(
            help="The workspace driver: local or modal (default: MODAL_WORKSPACE_DRIVER, else "
            "local).",
            show_default=False,
        ),
    ] = None,
    data_root: Annotated[
        Path | None,
        typer.Option(
            help="Where the local driver keeps workspaces (default: the user's data directory).",
            show_default=False,
        ),
    ] = None,
) -> None:
    if driver not in (None, "local", "modal"):
        raise typer.BadParameter(f"{driver!r}: local or modal", param_hint="'--driver'")
    from .serving import serve as run_server

    _done(run_server(host, port, driver, data_root))


@app.command()
def token(json_: Json = False) -> None:
    """Mint a bearer token and print it."""
    minted = mint_token()
    typer.echo(json.dumps({"token": minted}) if json_ else minted)


# --- workspaces ----------------------------------------------------------------------------------


@app.command()
def create(
    ctx: typer.Context,
    template: Annotated[
        str | None, typer.Option(help="Start from a template's newest build.", show_default=False)
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            help="Clone OWNER/REPO (GitHub) into it, with git's progress.", show_default=False
        ),
    ] = None,
    ref: Annotated[
        str | None, typer.Option(help="With --repo: the branch, tag or commit.", show_default=False)
    ] = None,
    destination: Annotated[
        str | None,
        typer.Option(help="With --repo: where (default /workspace/REPO).", show_default=False),
    ] = None,
    use_github_token: Annotated[
        bool, typer.Option(help="With --repo: clone with the gateway's GitHub token.")
    ] = False,
    cpu: Annotated[
        float | None, typer.Option(help="CPU cores it requests.", show_default=False)
    ] = None,
    memory: Annotated[
        int | None, typer.Option(help="Memory it requests, in MiB.", show_default=False)
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="A GPU (Modal), e.g. T4 or H100:2.", show_default=False)
    ] = None,
    timeout: Annotated[
        int | None, typer.Option(help="Its lifetime, in seconds.", show_default=False)
    ] = None,
    idle_timeout: Annotated[
        int | None, typer.Option(help="Suspended after this many idle seconds.", show_default=False)
    ] = None,
    resources: Annotated[
        str | None,
        typer.Option(
            help="Any other resources, as JSON (the API's resources object).", show_default=False
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env", "-e", help="KEY=VALUE for every command (repeatable).", show_default=False
        ),
    ] = None,
    secret: Annotated[
        list[str] | None,
        typer.Option(
            help="An allowlisted secret, as environment (repeatable).", show_default=False
        ),
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE label (repeatable).", show_default=False)
    ] = None,
    block_network: Annotated[bool, typer.Option(help="No network access.")] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="The same key answers the same workspace.", show_default=False),
    ] = None,
    json_: Json = False,
) -> None:
    """Create a workspace, cloning --repo into it; print its id.

    Its id alone is the output (`WS=$(modal-workspace create)`); with --repo, git's progress
    shows while the clone runs, and a failed clone leaves the workspace there (status 1).
    """
    wanted: dict[str, Any] = _json_object(resources, "--resources")
    for name, value in (
        ("cpu", cpu),
        ("memory_mb", memory),
        ("gpu", gpu),
        ("timeout_seconds", timeout),
        ("idle_timeout_seconds", idle_timeout),
    ):
        if value is not None:
            wanted[name] = value
    fields: dict[str, Any] = {
        "template": template,
        "env": _pairs(env, "--env"),
        "secret_names": list(secret or []),
        "tags": _pairs(tag, "--tag"),
        "block_network": block_network,
        "idempotency_key": idempotency_key,
    }
    if wanted:
        fields["resources"] = wanted
    fields = {k: v for k, v in fields.items() if v not in (None, {}, [])}
    if repo is None and (ref or destination or use_github_token):
        raise typer.BadParameter("needs --repo", param_hint="'--ref', '--destination'")
    clone = _clone_fields(repo, ref, destination, None, use_github_token) if repo else None
    from . import workspace_commands as commands

    _run(ctx, json_, lambda client, out: commands.create(client, out, fields, clone))


@app.command()
def clone(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    repository: Annotated[str, typer.Argument(help="OWNER/REPO or https://github.com/OWNER/REPO")],
    ref: Annotated[
        str | None, typer.Option(help="The branch, tag or commit.", show_default=False)
    ] = None,
    destination: Annotated[
        str | None, typer.Option(help="Where (default /workspace/REPO).", show_default=False)
    ] = None,
    depth: Annotated[
        int | None, typer.Option(help="A shallow clone's depth.", show_default=False)
    ] = None,
    use_github_token: Annotated[
        bool, typer.Option(help="Clone with the gateway's GitHub token.")
    ] = False,
    json_: Json = False,
) -> None:
    """Clone a GitHub repository into a workspace, showing progress.

    Prints where the clone is; exits 1 when git failed (its output then on stderr).
    """
    fields = _clone_fields(repository, ref, destination, depth, use_github_token)
    from . import workspace_commands as commands

    _run(ctx, json_, lambda client, out: commands.clone(client, out, workspace_id, fields))


@app.command("list")
def list_(ctx: typer.Context, json_: Json = False) -> None:
    """List the workspaces that have not been terminated."""
    from . import workspace_commands as commands

    _run(ctx, json_, commands.list_workspaces)


@app.command()
def get(ctx: typer.Context, workspace_id: WorkspaceId, json_: Json = False) -> None:
    """Show a workspace: its state, resources, tags and lineage."""
    from . import workspace_commands as commands

    _run(ctx, json_, lambda client, out: commands.get(client, out, workspace_id))


@app.command()
def snapshot(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    label: Annotated[str, typer.Option(help="Your name for it.")] = "",
    ttl: Annotated[
        int | None, typer.Option(help="Delete it after this many seconds.", show_default=False)
    ] = None,
    json_: Json = False,
) -> None:
    """Snapshot a workspace, showing progress; print the snapshot id.

    The snapshot holds its files, home, exec history and its repositories' HEADs.
    """
    fields = {"label": label, "ttl_seconds": ttl}
    from . import workspace_commands as commands

    _run(ctx, json_, lambda client, out: commands.snapshot(client, out, workspace_id, fields))


@app.command()
def fork(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    snapshot_id: Annotated[
        str | None,
        typer.Option(
            "--snapshot", help="The snapshot (default: one taken now).", show_default=False
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="The same key answers the same fork.", show_default=False)
    ] = None,
    json_: Json = False,
) -> None:
    """Fork a workspace from a snapshot; print the new one's id."""
    fields = {"snapshot_id": snapshot_id, "idempotency_key": idempotency_key}
    from . import workspace_commands as commands

    _run(ctx, json_, lambda client, out: commands.fork(client, out, workspace_id, fields))


@app.command()
def resume(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    snapshot_id: Annotated[
        str | None,
        typer.Option("--snapshot", help="The snapshot (default: its latest).", show_default=False),
    ] = None,
    json_: Json = False,
) -> None:
    """Resume a workspace from a snapshot (its latest by default).

    The same id, files, tags and repositories as then; commands running then are lost.
    """
    from . import workspace_commands as commands

    _run(ctx, json_, lambda client, out: commands.resume(client, out, workspace_id, snapshot_id))


@app.command()
def terminate(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    keep_snapshot: Annotated[
        bool | None,
        typer.Option(
            "--keep-snapshot/--no-keep-snapshot",
            help="Snapshot it first, so that it can be resumed (default: on Modal).",
            show_default=False,
        ),
    ] = None,
    purge: Annotated[bool, typer.Option(help="Delete its snapshots too.")] = False,
    json_: Json = False,
) -> None:
    """Terminate a workspace and everything running in it."""
    fields = {"keep_snapshot": keep_snapshot, "purge": purge}
    from . import workspace_commands as commands

    _run(ctx, json_, lambda client, out: commands.terminate(client, out, workspace_id, fields))


# --- commands and files --------------------------------------------------------------------------


@app.command(
    "exec",
    # Everything after the workspace is the command's, options included (as `docker exec`).
    context_settings={"allow_interspersed_args": False},
)
def exec_(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    command: Annotated[
        list[str],
        typer.Argument(
            help="One argument: a shell line. Several: a command and its arguments, quoted as "
            "given.",
            show_default=False,
        ),
    ],
    workdir: Annotated[
        str | None,
        typer.Option(
            "--workdir", "-w", help="Where it runs (default /workspace).", show_default=False
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", "-e", help="KEY=VALUE (repeatable).", show_default=False),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Killed after this many seconds.", show_default=False)
    ] = None,
    json_: Json = False,
) -> None:
    """Run a command in a workspace, streaming its output live.

    Its stdout and stderr arrive here as it writes them, and this exits with its status
    (128+N when signal N ended it, 125 when it never ran or this could not run it). Options go
    before the workspace: everything after it is the command's. Ctrl+C cancels it.
    """
    line = command[0] if len(command) == 1 else shlex.join(command)
    start = {
        "command": line,
        "workdir": workdir,
        "env": _pairs(env, "--env") or None,
        "timeout_seconds": timeout,
    }
    start = {k: v for k, v in start.items() if v is not None}
    from . import exec_commands

    _run(
        ctx,
        json_,
        lambda client, out: exec_commands.exec_command(client, out, workspace_id, start),
        failure=exec_commands.NO_EXIT_CODE,
    )


@app.command()
def logs(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    exec_id: Annotated[str, typer.Argument(help="The exec: ex-…", show_default=False)],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Follow it to its end; exit with its status.")
    ] = False,
    json_: Json = False,
) -> None:
    """Print a realtime exec's output; -f follows it to its end.

    Following, it exits with the command's status once the command has ended.
    """
    from . import exec_commands

    _run(
        ctx,
        json_,
        lambda client, out: exec_commands.logs(client, out, workspace_id, exec_id, follow),
    )


@app.command()
def cp(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="A path here, or ws-…:PATH", show_default=False)],
    destination: Annotated[
        str, typer.Argument(help="A path here, or ws-…:PATH", show_default=False)
    ],
    overwrite: Annotated[bool, typer.Option(help="Replace what is where the copy lands.")] = False,
    json_: Json = False,
) -> None:
    """Copy files or trees between here and a workspace (ws-…:PATH).

    Byte for byte, either way, with a bar of the bytes moved. The copy lands at the
    destination, or inside it when that is a directory (a workspace path ending in /, or a
    local directory that exists); what is already there is replaced only with --overwrite.
    """
    from . import copying

    _run(ctx, json_, lambda client, out: copying.copy(client, out, source, destination, overwrite))


@app.command()
def shell(ctx: typer.Context, workspace_id: WorkspaceId) -> None:
    """Open an interactive shell in a workspace, in this terminal.

    bash (else sh) in /workspace, on a pseudo-terminal the size of this one and resized with
    it. Every key goes to the shell, Ctrl+C and Ctrl+D too; this terminal is restored when the
    shell ends, and this exits with the shell's status.
    """
    from . import shell as terminal

    _run(ctx, False, lambda client, out: terminal.shell(client, out, workspace_id))


@app.command("open")
def open_(
    ctx: typer.Context,
    workspace_id: WorkspaceId,
    exec_id: Annotated[
        str | None,
        typer.Option("--exec", help="Watch this exec (an agent's) instead of a new shell."),
    ] = None,
    write: Annotated[bool, typer.Option(help="Type into the exec too, not only watch.")] = False,
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the link; open no browser.")
    ] = False,
    json_: Json = False,
) -> None:
    """Open a workspace's terminal page in a browser (a new shell, or an exec to watch).

    The link carries a ticket for this one terminal that expires in a few minutes, never your
    token; it is printed, and opened in this machine's browser when this runs in a terminal.
    It needs a gateway (--url): in process there is no page to open.
    """
    from . import workspace_commands as commands

    browse = not print_only and sys.stdout.isatty()
    _run(
        ctx,
        json_,
        lambda client, out: commands.open_terminal(
            client, out, workspace_id, exec_id, write, browse
        ),
    )


# --- helpers -------------------------------------------------------------------------------------


def _run(ctx: typer.Context, json_mode: bool, work: Any, *, failure: int = 1) -> None:
    from .session import run

    _done(run(_target(ctx), json_mode, work, failure=failure))


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    pairs = {}
    for value in values or ():
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{value!r}: KEY=VALUE", param_hint=f"'{option}'")
        pairs[key] = rest
    return pairs


def _json_object(value: str | None, option: str) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        raise typer.BadParameter("not JSON", param_hint=f"'{option}'") from None
    if not isinstance(parsed, dict):
        raise typer.BadParameter("a JSON object", param_hint=f"'{option}'")
    return parsed


def _clone_fields(
    repository: str, ref: str | None, destination: str | None, depth: int | None, token: bool
) -> dict[str, Any]:
    fields = {
        "repository": repository,
        "ref": ref,
        "destination": destination,
        "depth": depth,
        "use_github_token": token,
    }
    return {k: v for k, v in fields.items() if v is not None}
