"""`make demo`: everything the README's walkthroughs need, in one command and one terminal.

Starts the stand-in GitHub (`demo_git_server.py`, with its GitHub App, so that pull requests
open too) and a gateway on the local driver set up to use it, at 127.0.0.1:8765 with a data
root of its own and a token that stays the same across runs (kept in the demo's folder). It
prints the two lines to paste into the terminal where you follow the README; Ctrl+C stops it
all.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo_git_server import start_stand_in


def demo_token(work: Path) -> str:
    """The operator's token: the environment's when set, else one kept in `work`."""
    given = os.environ.get("MODAL_WORKSPACE_MCP_TOKEN")
    if given:
        return given
    kept = work / "token"
    if not kept.exists():
        kept.write_text(secrets.token_urlsafe(32) + "\n")
        kept.chmod(0o600)
    return kept.read_text().strip()


def _shown(path: Path) -> str:
    """The path as the reader types it: relative to where they ran `make demo` when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--dir", default=".demo", help="the demo's folder (default: .demo)")
    args = parser.parse_args()
    work = Path(args.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    # The stand-in starts as the walkthrough expects it, every run.
    github = work / "github"
    shutil.rmtree(github, ignore_errors=True)
    github.mkdir()
    stand_in = start_stand_in(github, with_app=True)
    token = demo_token(work)
    env = {
        **os.environ,
        **stand_in.env,
        "MODAL_WORKSPACE_MCP_TOKEN": token,
    }
    serve = Path(sys.executable).with_name("modal-workspace")
    argv = [str(serve), "serve", "--driver", "local", "--host", "127.0.0.1"]
    argv += ["--port", str(args.port), "--data-root", str(work / "data")]
    # What the README's in-process Python example needs of the stand-in, sourced where it runs;
    # it serves its own workspaces from a data root beside the server's.
    in_process = {**stand_in.env, "MODAL_WORKSPACE_DATA_ROOT": str(work / "python-data")}
    env_file = work / "env.sh"
    env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in in_process.items()))
    env_file.chmod(0o600)
    print(f"stand-in GitHub: {stand_in.server.base_url} (octocat/hello, with a GitHub App)")
    print("in the terminal where you follow the README:")
    print(f"  export TOKEN={token} BASE=http://127.0.0.1:{args.port}")
    print(f"  . {_shown(env_file)}   # for the in-process Python example", flush=True)
    server = subprocess.Popen(argv, env=env)
    # Stopped by a signal other than Ctrl+C (a terminal closing, `kill`): the server too.
    signal.signal(signal.SIGTERM, lambda *_: server.send_signal(signal.SIGINT))
    signal.signal(signal.SIGHUP, lambda *_: server.send_signal(signal.SIGINT))
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.send_signal(signal.SIGINT)
        return server.wait()
    finally:
        stand_in.stop()


if __name__ == "__main__":
    sys.exit(main())
