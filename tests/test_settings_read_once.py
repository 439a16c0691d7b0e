"""Every setting is read from the environment once, by the configuration package (`config/`), and
reaches the rest of the package in the `Settings` it is handed (docs/architecture.md, "The
Python layers").

- No module outside `config/` reads the process's environment (`os.environ`, `os.getenv`) for a
  `MODAL_WORKSPACE_*` variable, nor for a name the configuration declares, nor whole; the few
  reads that are no setting of the gateway's are listed here, each with why (`NOT_SETTINGS`).
- Inside `config/`, each variable's name is declared once, and `load_settings` reads each
  variable once and reads every one it declares.

`modal_app.py` (outside the package) reads a few variables itself where `modal deploy` runs: the
package is not installed there, and those variables say how to deploy, not how to serve.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import modal_workspace_core
from modal_workspace_core.config import load_settings

ROOT = Path(modal_workspace_core.__file__).parent
CONFIG = "config"
PREFIX = "MODAL_WORKSPACE_"
WHOLE = "(the whole environment)"
# What `os` offers to read the environment with.
READERS = {"environ", "environb", "getenv", "getenvb"}

# The environment reads outside config/ that are no setting of the gateway's, each with why.
NOT_SETTINGS: dict[tuple[str, str], str] = {
    ("drivers.local.launch", "PATH"): "an unisolated workspace's agent finds its programs on the "
    "gateway's own PATH (an isolated one gets the sandbox's fixed PATH); it configures nothing "
    "of the gateway's, and is handed to the child as it is",
}


@dataclass(frozen=True)
class Read:
    module: str
    key: str
    line: int

    def __str__(self) -> str:
        return f"{self.module}:{self.line} reads {self.key}"


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), ast.parse(path.read_text(), str(path))


def _in_config(module: str) -> bool:
    return module == CONFIG or module.startswith(CONFIG + ".")


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """The module's top-level `NAME = "text"` assignments."""
    out: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
            continue
        if isinstance(text := node.value.value, str):
            out.update({t.id: text for t in node.targets if isinstance(t, ast.Name)})
    return out


def config_names() -> dict[str, list[str]]:
    """Each `MODAL_WORKSPACE_*` variable the configuration declares -> the constants naming it."""
    names: dict[str, list[str]] = {}
    for module, tree in _modules():
        if _in_config(module):
            for constant, value in _string_constants(tree).items():
                if value.startswith(PREFIX):
                    names.setdefault(value, []).append(f"{module}.{constant}")
    return names


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _key(node: ast.AST | None, constants: Mapping[str, str]) -> str:
    """The variable a read names: a literal, or a constant of the module's or the config's."""
    if node is None:
        return WHOLE
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return ast.unparse(node)


def _read_key(reader: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> ast.AST | None:
    """What `reader` (`os.environ`, `os.getenv`, …) is asked for; None where it is taken whole."""
    parent = parents.get(reader)
    if isinstance(parent, ast.Call) and parent.func is reader:  # getenv(KEY)
        return parent.args[0] if parent.args else None
    if isinstance(parent, ast.Subscript) and parent.value is reader:  # environ[KEY]
        return parent.slice
    if isinstance(parent, ast.Compare) and reader in parent.comparators:  # KEY in environ
        return parent.left
    if isinstance(parent, ast.Attribute) and parent.attr in ("get", "pop", "setdefault"):
        call = parents.get(parent)
        if isinstance(call, ast.Call) and call.func is parent and call.args:
            return call.args[0]
    return None


def environment_reads() -> list[Read]:
    """Every read of the process's environment by a module outside config/."""
    # A config constant imported elsewhere resolves to the variable it names.
    known: dict[str, str] = {}
    for module, tree in _modules():
        if _in_config(module):
            known.update({k: v for k, v in _string_constants(tree).items() if v.startswith(PREFIX)})
    reads = []
    for module, tree in _modules():
        if _in_config(module):
            continue
        constants = {**known, **_string_constants(tree)}
        parents = _parents(tree)
        os_names = {"os"}
        direct: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
            elif isinstance(node, ast.ImportFrom) and node.module == "os":
                direct |= {a.asname or a.name for a in node.names if a.name in READERS}
        for node in ast.walk(tree):
            through_os = (
                isinstance(node, ast.Attribute)
                and node.attr in READERS
                and isinstance(node.value, ast.Name)
                and node.value.id in os_names
            )
            if through_os or (isinstance(node, ast.Name) and node.id in direct):
                assert isinstance(node, ast.expr)
                key = _key(_read_key(node, parents), constants)
                reads.append(Read(module, key, node.lineno))
    return reads


def test_no_module_outside_config_reads_a_setting_from_the_environment() -> None:
    names = config_names()
    settings = [str(r) for r in environment_reads() if r.key.startswith(PREFIX) or r.key in names]
    assert settings == [], "read it in config/ and take it from the Settings handed over"


def test_every_other_environment_read_is_no_setting_and_says_why() -> None:
    reads = environment_reads()
    unlisted = [str(r) for r in reads if (r.module, r.key) not in NOT_SETTINGS]
    assert unlisted == [], "a setting belongs in config/; anything else is listed with why"
    # The list keeps up with the code, and never lists a setting.
    assert set(NOT_SETTINGS) == {(r.module, r.key) for r in reads}
    assert [key for _, key in NOT_SETTINGS if key.startswith(PREFIX) or key == WHOLE] == []


def test_each_variable_is_named_once_in_the_configuration() -> None:
    twice = {name: where for name, where in config_names().items() if len(where) > 1}
    assert twice == {}


class CountingEnviron(Mapping[str, str]):
    """An environment that counts how often each variable is looked up."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._given = dict(values)
        self.lookups: Counter[str] = Counter()

    def __getitem__(self, key: str) -> str:
        self.lookups[key] += 1
        return self._given[key]

    def __iter__(self) -> Iterator[str]:
        self.lookups[WHOLE] += 1
        return iter(self._given)

    def __len__(self) -> int:
        return len(self._given)


def _every_setting(tmp_path: Path) -> dict[str, str]:
    """A valid value for every variable, so that every branch that reads one runs."""
    token_file = tmp_path / "tokens"
    token_file.write_text("a-second-token\n")
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"openai": {"OPENAI_API_KEY": "sk-local"}}))
    key_file = tmp_path / "app.pem"
    key_file.write_text("-----BEGIN RSA PRIVATE KEY-----\n…\n-----END RSA PRIVATE KEY-----\n")
    return {
        f"{PREFIX}MCP_TOKEN": "a-first-token",
        f"{PREFIX}MCP_TOKEN_FILE": str(token_file),
        f"{PREFIX}CHANNEL_SECRET": "c" * 32,
        f"{PREFIX}DRIVER": "modal",
        f"{PREFIX}DATA_ROOT": str(tmp_path / "data"),
        f"{PREFIX}ALLOWED_SECRETS": "openai:OPENAI_API_KEY,github",
        f"{PREFIX}ALLOWED_VOLUMES": "cache",
        f"{PREFIX}ALLOWED_GPUS": "T4,H100:2",
        f"{PREFIX}LOCAL_SECRETS_FILE": str(secrets),
        f"{PREFIX}ALLOWED_HOSTS": "gateway.example.com",
        f"{PREFIX}TRUSTED_PROXIES": "10.0.0.5",
        f"{PREFIX}PUBLIC_URL": "https://gateway.example.com",
        f"{PREFIX}PREVIEW_HOST": "preview.example.com",
        f"{PREFIX}AGENT_TIMEOUT": "45",
        f"{PREFIX}CHANNEL_KEEPALIVE_SECONDS": "20",
        f"{PREFIX}ISOLATION": "none",
        f"{PREFIX}DISK_MB": "2048",
        f"{PREFIX}HOST_PORTS": "8080",
        f"{PREFIX}SNAPSHOT_BUDGET_MB": "4096",
        f"{PREFIX}SNAPSHOTS_BUDGET_MB": "8192",
        f"{PREFIX}SNAPSHOT_FREE_FLOOR_MB": "512",
        f"{PREFIX}GITHUB_SECRET": "github",
        f"{PREFIX}GITHUB_URL": "https://github.example.com",
        f"{PREFIX}GITHUB_API_URL": "https://github.example.com/api/v3",
        f"{PREFIX}ALLOW_GITHUB_SECRET_IN_WORKSPACES": "1",
        f"{PREFIX}GITHUB_APP_ID": "12345",
        # The key itself wins over its file, whose path is still read (a private file).
        f"{PREFIX}GITHUB_APP_PRIVATE_KEY": key_file.read_text(),
        f"{PREFIX}GITHUB_APP_PRIVATE_KEY_FILE": str(key_file),
        f"{PREFIX}GITHUB_APP_INSTALLATION_ID": "678",
        f"{PREFIX}GIT_AUTHOR_NAME": "Review Bot",
        f"{PREFIX}GIT_AUTHOR_EMAIL": "bot@example.com",
        f"{PREFIX}JANITOR_SECONDS": "60",
        f"{PREFIX}SAFETY_MARGIN_SECONDS": "600",
        f"{PREFIX}RETENTION_SECONDS": "86400",
        f"{PREFIX}TEMPLATE_CHECK_SECONDS": "600",
        f"{PREFIX}ALLOWED_FUNCTIONS": "ml/predict",
        f"{PREFIX}FUNCTIONS_IN_ACTIONS": "1",
        f"{PREFIX}ARTIFACT_MAX_BYTES": str(1 << 21),
        f"{PREFIX}ARTIFACT_LINK_SECONDS": "120",
        f"{PREFIX}OAUTH_TOKEN_SECONDS": "3600",
        f"{PREFIX}SANDBOX_APP": "sandboxes",
        f"{PREFIX}DEFAULT_IMAGE_NAME": "workspace-image",
        f"{PREFIX}CHANNEL_IDLE_SECONDS": "30",
        f"{PREFIX}DEFAULT_IDLE_TIMEOUT_SECONDS": "1800",
        f"{PREFIX}WARM_POOL": "2",
        f"{PREFIX}STATE_VOLUME": "gateway-state",
        f"{PREFIX}WHEEL": str(tmp_path / "wheels"),
        # The command-line client's: the token wins over its file, whose path is still read.
        f"{PREFIX}URL": "https://gateway.example.com",
        f"{PREFIX}TOKEN": "a-client-token",
        f"{PREFIX}TOKEN_FILE": str(token_file),
        "GH_TOKEN": "gh-token",
    }


def test_load_settings_reads_each_variable_once_and_every_one_it_declares(
    tmp_path: Path,
) -> None:
    given = _every_setting(tmp_path)
    env = CountingEnviron(given)

    settings = load_settings(env)

    assert settings.driver == "modal" and settings.modal is not None
    assert settings.modal.wheel == tmp_path / "wheels"
    assert settings.github_app_installation_id == 678
    twice = {key: n for key, n in env.lookups.items() if n > 1}
    assert twice == {}
    read = {key for key in env.lookups if key.startswith(PREFIX)}
    assert read == set(config_names())
    # The fixture keeps up too: every declared variable was given a value.
    assert set(config_names()) <= set(given)


def test_an_empty_environment_is_read_once_as_well() -> None:
    env = CountingEnviron({f"{PREFIX}DRIVER": "modal"})

    load_settings(env)

    assert {key: n for key, n in env.lookups.items() if n > 1} == {}
    assert {key for key in env.lookups if key.startswith(PREFIX)} == set(config_names())
