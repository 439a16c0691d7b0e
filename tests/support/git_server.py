"""A git smart-HTTP server for tests: bare repositories on 127.0.0.1 behind HTTP basic auth.

Runs the real `git http-backend` as a CGI and records every Authorization header it is sent (so a
test can prove a token reached it, or did not). An optional `authorize` callback (the fake
GitHub's tokens, scoped per repository) replaces the single username/token check. The gateway
reaches it as GitHub through its own setting (`gateway_env`: `MODAL_WORKSPACE_GITHUB_URL`),
never through a workspace's git configuration, so code under test keeps its strict GitHub URL
policy.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

# A clean environment for every git command the fixtures run: no user or system configuration,
# never a prompt.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
}

# `/OWNER/NAME.git` and what follows it (`/info/refs`, `/git-upload-pack`, ...).
_REPO_PATH = re.compile(r"^/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)\.git(/.*)?$")

# Decides a request: (slug `OWNER/NAME`, username, password, whether it writes) -> allowed.
Authorizer = Callable[[str, str, str, bool], bool]


@dataclass
class SeenRequest:
    method: str
    path: str
    authorization: str | None
    status: int


@dataclass
class GitServer:
    """Serves the bare repositories under `root` (`OWNER/NAME.git`) at `base_url`. Without
    `authorize`, `username`/`token` are the only credentials accepted, for every repository."""

    root: Path
    username: str
    token: str
    authorize: Authorizer | None = None
    base_url: str = ""
    requests: list[SeenRequest] = field(default_factory=list)
    _httpd: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> GitServer:
        self.root.mkdir(parents=True, exist_ok=True)
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/"
        threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # so that stop() returns promptly
            name="git-server",
            daemon=True,
        ).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def authorizations(self) -> list[str]:
        """Every Authorization header received, in order (including wrong ones)."""
        with self._lock:
            return [r.authorization for r in self.requests if r.authorization is not None]

    @property
    def passwords(self) -> list[str]:
        """The passwords of every Basic Authorization received, decoded."""
        return [cred[1] for a in self.authorizations if (cred := _basic(a)) is not None]

    def repo_url(self, slug: str) -> str:
        return f"{self.base_url}{slug}.git"

    @property
    def port(self) -> int:
        return int(self.base_url.rstrip("/").rsplit(":", 1)[1])

    @property
    def gateway_env(self) -> dict[str, str]:
        """The gateway settings that make this server its GitHub: git's base URL, and the host
        port a workspace must be allowed to reach on 127.0.0.1 (its network namespace blocks the
        host's loopback otherwise)."""
        return {
            "MODAL_WORKSPACE_GITHUB_URL": self.base_url,
            "MODAL_WORKSPACE_HOST_PORTS": str(self.port),
        }

    def create_repo(self, slug: str, commits: Mapping[str, Mapping[str, str]]) -> Path:
        """A bare repository `slug` (`OWNER/NAME`) whose branches hold the given files.

        `commits` maps a branch name to the files of one commit on top of the default branch
        `main` (which must come first); every branch therefore shares `main`'s history.
        """
        bare = self.root / f"{slug}.git"
        work = self.root.parent / f"work-{slug.replace('/', '-')}"
        _git(None, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
        _git(None, "init", "--quiet", "--initial-branch=main", str(work))
        _git(work, "remote", "add", "origin", str(bare))
        for branch, files in commits.items():
            if branch != "main":
                _git(work, "checkout", "--quiet", "-B", branch, "main")
            for name, text in files.items():
                path = work / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            _git(work, "add", "--all")
            _git(work, "commit", "--quiet", "-m", f"Add {', '.join(files)} on {branch}")
            _git(work, "push", "--quiet", "origin", f"{branch}:{branch}")
        shutil.rmtree(work)
        return bare

    def commit(
        self, slug: str, branch: str, files: Mapping[str, str], remove: tuple[str, ...] = ()
    ) -> str:
        """Moves `branch` of `slug` one commit on (as a push to GitHub would): `files` written,
        `remove` deleted. Returns the new commit."""
        bare = self.root / f"{slug}.git"
        work = self.root.parent / f"commit-{slug.replace('/', '-')}"
        shutil.rmtree(work, ignore_errors=True)
        _git(None, "clone", "--quiet", "--branch", branch, str(bare), str(work))
        for name, text in files.items():
            path = work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        for name in remove:
            _git(work, "rm", "--quiet", name)
        _git(work, "add", "--all")
        _git(work, "commit", "--quiet", "-m", f"Change {', '.join([*files, *remove])}")
        _git(work, "push", "--quiet", "origin", f"{branch}:{branch}")
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True, check=True
        ).stdout.strip()
        shutil.rmtree(work)
        return head

    def head(self, slug: str, branch: str) -> str:
        """The commit `branch` of `slug` is at."""
        return subprocess.run(
            ["git", "--git-dir", str(self.root / f"{slug}.git"), "rev-parse", branch],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def _record(self, seen: SeenRequest) -> None:
        with self._lock:
            self.requests.append(seen)


class _Handler(BaseHTTPRequestHandler):
    server_state: GitServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        # Quiet: the recorded requests are the log tests look at.
        pass

    def _serve(self) -> None:
        state = self.server_state
        authorization = self.headers.get("Authorization")
        path = urlsplit(self.path)
        credentials = _basic(authorization) if authorization else None
        if credentials is None or not _allowed(state, path.path, path.query, credentials):
            status, payload = 401, b"authentication required\n"
            headers = [
                ("WWW-Authenticate", 'Basic realm="git test server"'),
                ("Content-Type", "text/plain"),
            ]
            if credentials is not None and state.authorize is not None:
                # Credentials that are valid somewhere but not for this: GitHub's "denied".
                status, payload = 403, b"permission denied\n"
                headers = headers[1:]
        else:
            status, headers, payload = self._run_backend(path.path, path.query, credentials[0])
        # Recorded before answering: a client that has its answer finds its request here.
        state._record(SeenRequest(self.command, path.path, authorization, status))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _run_backend(
        self, path: str, query: str, user: str
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        body = self._read_body()
        env = {
            **os.environ,
            **_GIT_ENV,
            "GIT_PROJECT_ROOT": str(self.server_state.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": unquote(path),
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            # An authenticated user: http-backend then allows receive-pack (push).
            "REMOTE_USER": user,
            "REMOTE_ADDR": self.client_address[0],
            "SERVER_PROTOCOL": "HTTP/1.0",
        }
        if encoding := self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = encoding
        if protocol := self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = protocol
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        if done.returncode != 0 and status == 200:
            status, payload, headers = 500, done.stderr, [("Content-Type", "text/plain")]
        return status, headers, payload

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            # Large pushes arrive chunked; the CGI wants the whole body with its length.
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""


class ArgvSampler:
    """Samples every process's argv (`/proc/*/cmdline`) in the background, to prove a secret
    never appears in one while, say, a clone runs; with `environ=True`, every environment it
    may read (`/proc/*/environ`: all of them, as root) too.

    Nothing it fails to read is passed over in silence: a process that ended meanwhile is
    skipped, any other failure (another user's environment, for a sampler that is not root; a
    process the host shields even from root) is kept in `unreadable`, with when the process
    started, so a test can require that it read every process started after, say, the gateway
    (`unreadable_since`). `askpass_environs` counts the environments read of git steps the
    agent runs with its askpass (the ones that authenticate): proof that the sampler looked
    where the token would be."""

    def __init__(
        self,
        secret: str,
        interval: float = 0.002,
        *,
        environ: bool = False,
        also: tuple[str, ...] = (),
    ) -> None:
        self.environ = environ
        self.secret = secret.encode()
        self.secrets = [self.secret, *(s.encode() for s in also)]
        self.interval = interval
        self.samples = 0  # full scans of /proc
        self.git_seen = 0  # argv of git processes seen (proof the sampling overlapped the work)
        self.environs_read = 0  # environments read (a kernel thread's, empty, not counted)
        self.askpass_environs = 0  # environments read that name GIT_ASKPASS
        self.leaks: list[str] = []
        # "PATH: why" of each file that exists and could not be read, once each, and the start
        # time (clock ticks since boot) of its process (None when it could not be read).
        self.unreadable: dict[str, int | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="argv-sampler", daemon=True)

    def __enter__(self) -> ArgvSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _read(self, path: Path) -> bytes | None:
        """The file's bytes; None when the process ended (its directory gone) or the file could
        not be read (then noted in `unreadable`)."""
        try:
            return path.read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return None  # the process ended meanwhile
        except OSError as err:
            self.unreadable.setdefault(f"{path}: {err.strerror or err}", start_ticks(path.parent))
            return None

    def unreadable_since(self, ticks: int) -> list[str]:
        """What could not be read of processes started at `ticks` or later (or at an unknown
        time)."""
        return [what for what, started in self.unreadable.items() if (started or ticks) >= ticks]

    def _run(self) -> None:
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                argv = self._read(entry / "cmdline")
                if argv is None:
                    continue
                if any(secret in argv for secret in self.secrets):
                    for secret in self.secrets:
                        argv = argv.replace(secret, b"<secret>")
                    self.leaks.append(argv.decode(errors="replace"))
                if self.environ:
                    env = self._read(entry / "environ") or b""
                    if env:
                        self.environs_read += 1
                        if (b"\0" + env).find(b"\0GIT_ASKPASS=") >= 0:
                            self.askpass_environs += 1
                    if any(secret in env for secret in self.secrets):
                        program = argv.split(b"\0", 1)[0].decode(errors="replace")
                        self.leaks.append(f"environ of {program}")
                if argv.startswith(b"git") or b"/git" in argv.split(b"\0", 1)[0]:
                    self.git_seen += 1
            self.samples += 1
            self._stop.wait(self.interval)


def start_ticks(proc_dir: Path) -> int | None:
    """When the process of `/proc/PID` started, in clock ticks since boot (None once it ended):
    its stat is world-readable."""
    try:
        stat = (proc_dir / "stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def _basic(authorization: str) -> tuple[str, str] | None:
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = (
            base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        )
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def _allowed(state: GitServer, path: str, query: str, credentials: tuple[str, str]) -> bool:
    if state.authorize is None:
        return _matches(credentials, state.username, state.token)
    found = _REPO_PATH.match(path)
    if found is None:
        return False
    rest = found.group(2) or ""
    write = rest == "/git-receive-pack" or "service=git-receive-pack" in query.split("&")
    return state.authorize(found.group(1), credentials[0], credentials[1], write)


def _matches(credentials: tuple[str, str], username: str, token: str) -> bool:
    user_ok = hmac.compare_digest(credentials[0].encode(), username.encode())
    token_ok = hmac.compare_digest(credentials[1].encode(), token.encode())
    return user_ok and token_ok


def _git(cwd: Path | None, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **_GIT_ENV}, check=True)


# The repository every `git_server` test gets: `octo/hello` with `main` and two branches.
HELLO_REPO = "octo/hello"
HELLO_BRANCHES: dict[str, dict[str, str]] = {
    "main": {"README.md": "# hello\n", "src/hello.py": "print('hello')\n"},
    "feature": {"src/feature.py": "FEATURE = True\n"},
    "release/1.0": {"VERSION": "1.0\n"},
}


@pytest.fixture(scope="session")
def hello_repo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`octo/hello` built once per session; each server gets a copy it may change."""
    root = tmp_path_factory.mktemp("git-template") / "repos"
    GitServer(root=root, username="", token="").create_repo(HELLO_REPO, HELLO_BRANCHES)
    return root


@pytest.fixture
def git_server(
    tmp_path_factory: pytest.TempPathFactory, hello_repo_template: Path
) -> Iterator[GitServer]:
    """A running git server holding `octo/hello` (branches `main`, `feature`, `release/1.0`);
    its `gateway_env` makes it the gateway's GitHub, `username`/`token` the only credentials it
    accepts."""
    token = "ghp_" + binascii.hexlify(os.urandom(16)).decode()
    root = tmp_path_factory.mktemp("git-server") / "repos"
    shutil.copytree(hello_repo_template, root, symlinks=True)
    server = GitServer(root=root, username="x-access-token", token=token).start()
    try:
        yield server
    finally:
        server.stop()
