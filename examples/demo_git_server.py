"""A stand-in for GitHub on this machine, for the README's walkthroughs without internet: serves
`octocat/hello` over git's smart HTTP on 127.0.0.1, behind basic auth (like a private
repository: clone with `use_github_token`).

It is the test suite's own git server. Run it and export the settings it prints before
`make serve` or the README's Python example: they give the gateway the token and make this
server its GitHub (`MODAL_WORKSPACE_GITHUB_URL`), so `repo_clone` makes exactly the call it makes
against the real GitHub, and nothing is set up inside the workspace.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path

# The git server lives with the tests (they are its main user); this script reuses it as is.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to keep the repository and the secrets file")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="demo-git-"))
    token = "ghp_" + secrets.token_hex(16)
    server = GitServer(root=work / "repos", username="x-access-token", token=token).start()
    server.create_repo("octocat/hello", {"main": HELLO})
    # What an operator gives the local driver: the allowlisted secret `github` and its GH_TOKEN.
    secrets_file = work / "secrets.json"
    secrets_file.write_text(json.dumps({"github": {"GH_TOKEN": token}}))
    secrets_file.chmod(0o600)
    print(f"git server:  {server.base_url} (octocat/hello)", flush=True)
    print("before `make serve` or the README's Python example:")
    print("  export MODAL_WORKSPACE_ALLOWED_SECRETS=github")
    print(f"  export MODAL_WORKSPACE_LOCAL_SECRETS_FILE={secrets_file}")
    for name, value in server.gateway_env.items():
        print(f"  export {name}={value}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
