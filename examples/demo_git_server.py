"""A stand-in for GitHub on this machine, for the README's walkthroughs without internet: serves
`octocat/hello` over git's smart HTTP on 127.0.0.1, behind basic auth (like a private
repository: clone with `use_github_token`).

It is the test suite's own git server. Run it and export the settings it prints before
`make serve` or the README's Python example: they give the gateway the token and make this
server its GitHub (`MODAL_WORKSPACE_GITHUB_URL`), so `repo_clone` makes exactly the call it makes
against the real GitHub, and nothing is set up inside the workspace.

With `--app` it also serves a stand-in for GitHub's REST API with a GitHub App installed on
`octocat/hello` (the test suite's fake): the gateway then mints a token per operation, scoped to
the repository, and `repo_pull_request` opens its pull requests there; the git server then takes
only those tokens.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The git server lives with the tests (they are its main user); this script reuses it as is.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.fake_github import FakeGitHub
from support.git_server import GitServer

HELLO = {
    ".gitignore": "__pycache__/\n",
    "README.md": "# hello\n\nA tiny project for the walkthrough.\n",
    "hello.py": 'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n',
    "test_hello.py": (
        "import time\nimport unittest\n\nfrom hello import greet\n\n\n"
        "class GreetTest(unittest.TestCase):\n"
        "    def test_greets_by_name(self) -> None:\n"
        '        self.assertEqual(greet("Ada"), "Hello, Ada!")\n\n'
        "    def test_takes_its_time(self) -> None:\n"
        "        time.sleep(1)  # something to watch arrive live\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    ),
}


@dataclass
class StandIn:
    """The stand-in GitHub, running, and the gateway settings that make it the gateway's."""

    server: GitServer
    app: FakeGitHub | None
    env: dict[str, str]

    def stop(self) -> None:
        if self.app is not None:
            self.app.stop()
        self.server.stop()


def start_stand_in(work: Path, with_app: bool) -> StandIn:
    """Serves `octocat/hello` from `work` (and GitHub's API with an App, `with_app`)."""
    token = "ghp_" + secrets.token_hex(16)
    server = GitServer(root=work / "repos", username="x-access-token", token=token).start()
    server.create_repo("octocat/hello", {"main": HELLO})
    # What an operator gives the local driver: the allowlisted secret `github` and its GH_TOKEN.
    secrets_file = work / "secrets.json"
    secrets_file.write_text(json.dumps({"github": {"GH_TOKEN": token}}))
    secrets_file.chmod(0o600)
    env = {
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets_file),
        **server.gateway_env,
    }
    app = None
    if with_app:
        app = FakeGitHub(server)
        app.add_repo("octocat/hello")
        server.authorize = app.authorize_git
        app.start()
        key = work / "app-key.pem"
        key.write_text(app.private_key_pem)
        key.chmod(0o600)
        env |= {
            "MODAL_WORKSPACE_GITHUB_API_URL": app.api_url,
            "MODAL_WORKSPACE_GITHUB_APP_ID": str(app.app_id),
            "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE": str(key),
        }
    return StandIn(server, app, env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to keep the repository and the secrets file")
    parser.add_argument(
        "--app", action="store_true", help="also serve GitHub's API with a GitHub App installed"
    )
    args = parser.parse_args()
    stand_in = start_stand_in(Path(args.dir or tempfile.mkdtemp(prefix="demo-git-")), args.app)
    print(f"git server:  {stand_in.server.base_url} (octocat/hello)", flush=True)
    if stand_in.app is not None:
        app = stand_in.app
        print(f"GitHub API:  {app.api_url} (App {app.app_id}, installed on octocat/hello)")
    print("before `make serve` or the README's Python example:")
    for name, value in stand_in.env.items():
        print(f"  export {name}={value}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        stand_in.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
