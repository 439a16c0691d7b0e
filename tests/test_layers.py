"""The Python package's layers, held by its imports (docs/architecture.md, "The Python layers").

A short walk of every module's imports, as written (`ast`, nothing imported):
- a module imports only modules of its own layer or below, when it loads and for its
  annotations alike;
- the modules' load-time imports have no circle;
- an import inside a function is one of the few that load something heavy only where it is
  needed (`LAZY`, each with why), never one that dodges a circle;
- no module but `errors.py` catches the core's `PolicyError` (`errors.core_refusal` translates);
- the documented layers are these, in this order, and the documented layout names every module;
- inside `operations/`, the machinery imports no domain, a domain reaches another domain's work
  only through the shared modules named here (`SHARED`, each with why), and nothing there
  imports in a circle, not even for annotations.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import modal_workspace_core

PACKAGE = "modal_workspace_core"
ROOT = Path(modal_workspace_core.__file__).parent
ARCHITECTURE = ROOT.parent.parent / "docs" / "architecture.md"

# Bottom first. A module is in the layer of the longest prefix that names it ("" is the package
# root: the public names, served from the layers below on first use).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("_core", "errors", "policy", "config", "ring", "agent", "shared_store")),
    (
        "transport",
        ("channel", "drivers", "path_view", "modal_functions", "runtime.call", "runtime.progress"),
    ),
    ("runtime", ("runtime",)),
    ("operations", ("operations", "git")),
    ("serving", ("", "surfaces", "janitor")),
]

# Imports inside a function, each loading something only where it is needed.
LAZY: dict[tuple[str, str], str] = {
    ("drivers", "drivers.local"): "a driver, once chosen",
    ("drivers", "drivers.local.snapshots"): "a driver, once chosen",
    ("drivers", "drivers.modal.driver"): "a driver, once chosen (and with it the Modal SDK)",
    ("drivers", "drivers.modal.credentials"): "a driver, once chosen (the Modal SDK's "
    "configuration, checked before the driver opens)",
    ("surfaces.cli.serving", "operations"): "the server, for `modal-workspace serve` alone",
    ("surfaces.cli.serving", "surfaces.http_listen"): "the server, for `modal-workspace serve` "
    "alone",
    ("surfaces.cli.serving", "surfaces.http_serving"): "the server, for `modal-workspace serve` "
    "alone",
    ("surfaces.cli.serving", "surfaces.rest.app"): "the server, for `modal-workspace serve` alone",
    # The command line loads what a command does only when it runs: `--help` and shell
    # completion (this program, run at every Tab) load no operation, driver or server.
    ("surfaces.cli.app", "surfaces.cli.serving"): "the server's settings, for `serve` alone",
    ("surfaces.cli.app", "surfaces.cli.session"): "a command's client, when it runs",
    ("surfaces.cli.app", "surfaces.cli.workspace_commands"): "a command's work, when it runs",
    ("surfaces.cli.app", "surfaces.cli.exec_commands"): "a command's work, when it runs",
    ("surfaces.cli.app", "surfaces.cli.copying"): "a command's work, when it runs",
    ("surfaces.cli.app", "surfaces.cli.shell"): "a command's work, when it runs",
}


# The inner plan of `operations/`: what every domain is built with (the machinery), the modules
# several domains share, the modules that assemble the domains, and the domains themselves (every
# other module, a domain being `operations.<name>` and what is under it).
MACHINERY = "operations.machinery"
# Modules several domains share, each with why: a domain reaches another domain's work only
# through one of these, never by importing that domain.
SHARED: dict[str, str] = {
    "operations.exec_engine": "commands run to their end and the gateway's own git queries: the "
    "exec operations, the repo domain and lifecycle all run commands",
    "operations.lifecycle": "snapshot, pick, resume: the workspaces and snapshots domains, the "
    "sweep (janitor.py) and the runtime's hooks take the same steps",
    "operations.task_stream": "a long operation's progress as a stream the agent keeps: a "
    "snapshot reports on one, whether a handler or the lifecycle takes it",
    "operations.workspace_info": "the workspace as answered, and made once per idempotency key: "
    "the workspaces domain creates one, the snapshots domain forks and resumes one",
    "operations.resources": "a workspace's resources as a caller asks for them: the workspaces "
    "domain creates a workspace with them, the templates domain builds one and starts its "
    "workspaces with them",
    "operations.network_git": "git over the network as the agent's step, the token its "
    "credential: the repo domain clones and fetches with it, a template's build clones with it "
    "and the sweep asks a template's remote for its branch",
    "operations.template_records": "the templates' records in the shared store: the templates "
    "domain defines, lists and deletes them, the workspaces domain reads the build to start "
    "from, and builds and the sweep's checks write theirs",
    "operations.template_builds": "a template's builds, made and started from: the templates "
    "domain and the sweep's rebuilds make them, the workspaces domain starts workspaces from "
    "them (workspace_create's template)",
    "operations.experiment_records": "experiment runs in the shared store: the experiments "
    "domain records and reads them, a purge (the workspaces domain's terminate, the sweep) "
    "forgets a workspace's",
    "operations.template_checks": "whether a template's branch moved, and its rebuild: the sweep "
    "(janitor.py) runs it beside its other lifecycle steps, as it takes lifecycle's snapshots",
}
# The modules that put the domains together, which may import any of them.
ASSEMBLY: dict[str, str] = {
    "operations": "OPERATIONS: every domain's declarations, in the order the surfaces list them",
    "operations.hooks": "what the runtime borrows (resuming through lifecycle) and the services "
    "made with it",
}
# A domain's module whose name is not the domain's, with why.
DOMAIN_OF: dict[str, tuple[str, str]] = {
    "operations.experiment_lines": (
        "experiments",
        "the metric lines a run prints, read by the experiments domain's follower of each run",
    ),
    "operations.experiment_plot": (
        "experiments",
        "a run drawn as a PNG, for experiment_plot",
    ),
    "operations.experiment_follow": (
        "experiments",
        "a run followed to its end and recorded as it goes, by the experiments domain's calls",
    ),
    "operations.experiment_system": (
        "experiments",
        "what a run's workspace used while it ran, folded from its metrics stream",
    ),
    "operations.experiment_page": (
        "experiments",
        "a run's page for people: the ticket minted for it and the page's link",
    ),
    "operations.artifact_transfer": (
        "artifacts",
        "the artifacts' agent steps and signed links, which REST and the Python client use too",
    ),
}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    where: str  # "load", "typing" (under TYPE_CHECKING) or "function"


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    found["_core"] = ROOT / "_core.pyi"
    return found


def _target(module: str, node: ast.ImportFrom, is_package: bool, known: set[str]) -> list[str]:
    if node.level == 0:
        base = (node.module or "").split(".")
        if base[0] != PACKAGE:
            return []
        base = base[1:]
    else:
        here = module.split(".") if module else []
        if not is_package:
            here = here[:-1]
        base = here[: len(here) - (node.level - 1)] + (
            node.module.split(".") if node.module else []
        )
    prefix = ".".join(base)
    out = []
    for alias in node.names:
        name = f"{prefix}.{alias.name}" if prefix else alias.name
        out.append(name if name in known else prefix)
    return out


def imports() -> Iterator[Import]:
    known = modules()
    for module, path in known.items():
        if path.suffix == ".pyi":
            continue
        tree = ast.parse(path.read_text(), str(path))
        yield from _walk(module, tree.body, "load", path.name == "__init__.py", set(known))


def _walk(
    module: str, body: list[ast.stmt], where: str, is_package: bool, known: set[str]
) -> Iterator[Import]:
    for node in body:
        if isinstance(node, ast.ImportFrom):
            for target in _target(module, node, is_package, known):
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != module:
                    yield Import(module, target, node.lineno, where)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    yield Import(module, alias.name[len(PACKAGE) + 1 :], node.lineno, where)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _walk(module, node.body, "typing", is_package, known)
            yield from _walk(module, node.orelse, where, is_package, known)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _walk(module, node.body, "function", is_package, known)
        elif isinstance(node, ast.ClassDef):
            yield from _walk(module, node.body, where, is_package, known)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    stmts = [s for s in inner if isinstance(s, ast.stmt)]
                    for handler in (h for h in inner if isinstance(h, ast.ExceptHandler)):
                        stmts.extend(handler.body)
                    yield from _walk(module, stmts, where, is_package, known)


def layer(module: str) -> int:
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix and module.startswith(prefix + "."))
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, f"{module} is in no layer: give it one in LAYERS (and the docs)"
    return best


def test_every_module_is_in_a_layer() -> None:
    for module in modules():
        layer(module)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{i.source} (line {i.line}) imports {i.target}: "
        f"{LAYERS[layer(i.source)][0]} -> {LAYERS[layer(i.target)][0]}"
        for i in imports()
        if i.where != "function" and layer(i.target) > layer(i.source)
    ]
    assert upward == []


def test_the_imports_a_module_loads_with_have_no_circle() -> None:
    edges: dict[str, set[str]] = {}
    for i in imports():
        if i.where == "load":
            edges.setdefault(i.source, set()).add(i.target)
    circles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert circles == []


def test_an_import_inside_a_function_loads_something_heavy_and_says_why() -> None:
    inside = {(i.source, i.target) for i in imports() if i.where == "function"}
    assert inside - set(LAZY) == set(), "an import hides in a function: put it at the top"
    # The list keeps up with the code: nothing stays listed once it moved.
    assert set(LAZY) - inside == set()


def test_only_the_error_model_catches_the_cores_refusals() -> None:
    catching = []
    for module, path in modules().items():
        if path.suffix == ".pyi" or module == "errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            handler = isinstance(node, ast.ExceptHandler) and node.type is not None
            if handler and "PolicyError" in ast.unparse(node.type):  # type: ignore[attr-defined]
                catching.append(f"{module}:{node.lineno}")
    assert catching == [], "run the rule inside errors.core_refusal instead"


def test_the_documented_layers_are_these_in_this_order() -> None:
    text = ARCHITECTURE.read_text()
    match = re.search(
        r"The Python layers, each importing only those below it:(.*?)\n\n", text, re.S
    )
    assert match is not None, "docs/architecture.md lost its paragraph on the layers"
    paragraph = match.group(1)
    chain = paragraph.split(". ")[0]  # the first sentence: top -> ... -> bottom
    named = re.findall(r"`([a-z_/]+?)(?:\.py|/)?`", chain)
    levels = [layer(name.strip("/").replace("/", ".")) for name in named]
    assert named, chain
    assert levels == sorted(levels, reverse=True), (named, levels)
    assert set(levels) == set(range(len(LAYERS))), (named, levels)


def test_every_path_the_documented_layout_names_exists() -> None:
    """The layout block of docs/architecture.md: each name under its parent (two spaces a level),
    files and folders alike, is there in the checkout."""
    text = ARCHITECTURE.read_text()
    block = text.split("## 3. Layout", 1)[1].split("```", 2)[1]
    checkout = ARCHITECTURE.parent.parent
    parents: list[Path] = []
    missing = []
    for line in block.splitlines():
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if not stripped or indent > 2 * len(parents):
            continue  # an explanation's second line
        names = stripped.split("  ", 1)[0].strip()
        parents = parents[: indent // 2]
        base = parents[-1] if parents else checkout
        for name in (n.strip() for n in names.split(",")):
            if not (base / name.rstrip("/")).exists():
                missing.append(str((base / name).relative_to(checkout)))
        if names.endswith("/"):
            parents.append(base / names.rstrip("/"))
    assert missing == []


def part(module: str) -> str:
    """Where a module of `operations/` stands in its inner plan: "machinery", "shared",
    "assembly" or "domain <name>"."""
    if module == MACHINERY or module.startswith(MACHINERY + "."):
        return "machinery"
    if module in SHARED:
        return "shared"
    if module in ASSEMBLY:
        return "assembly"
    if module in DOMAIN_OF:
        return "domain " + DOMAIN_OF[module][0]
    return "domain " + module.split(".")[1]


def operations_imports() -> list[Import]:
    """Imports of every kind (at load, for annotations, inside a function) from one module of
    `operations/` to another."""
    inside = [
        i for i in imports() if i.source.startswith("operations.") or i.source == "operations"
    ]
    return [i for i in inside if i.target.startswith("operations.") or i.target == "operations"]


def test_the_machinery_imports_no_domain() -> None:
    """What every domain is built with knows none of them: a domain can be added, changed or
    removed without touching it."""
    wrong = [
        f"{i.source} (line {i.line}) imports {i.target}, {part(i.target)}"
        for i in operations_imports()
        if part(i.source) == "machinery" and part(i.target) != "machinery"
    ]
    assert wrong == []


def test_the_shared_modules_import_no_domain() -> None:
    wrong = [
        f"{i.source} (line {i.line}) imports {i.target}, {part(i.target)}"
        for i in operations_imports()
        if part(i.source) == "shared" and part(i.target) not in ("machinery", "shared")
    ]
    assert wrong == []


def test_a_domain_reaches_another_only_through_the_shared_modules() -> None:
    wrong = [
        f"{i.source} (line {i.line}) imports {i.target}, {part(i.target)}: move what both need "
        "into a shared module (SHARED, with why)"
        for i in operations_imports()
        if part(i.source).startswith("domain ")
        and part(i.target) not in ("machinery", "shared", part(i.source))
    ]
    assert wrong == []


def test_the_operations_import_in_no_circle_even_for_annotations() -> None:
    edges: dict[str, set[str]] = {}
    for i in operations_imports():
        edges.setdefault(i.source, set()).add(i.target)
    circles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert circles == []


def test_the_named_parts_of_the_operations_exist() -> None:
    """The lists keep up with the code: nothing stays named once it moved."""
    known = modules()
    named = [*SHARED, *ASSEMBLY, *DOMAIN_OF, MACHINERY]
    assert [name for name in named if name not in known] == []


def test_the_documented_inner_plan_of_the_operations_names_the_shared_modules() -> None:
    text = ARCHITECTURE.read_text()
    match = re.search(r"Inside `operations/`(.*?)\n\n", text, re.S)
    assert match is not None, "docs/architecture.md lost its paragraph on the operations' plan"
    shared = re.search(r"The shared modules(.*?)\.\s", match.group(1), re.S)
    assert shared is not None, "the paragraph on the operations' plan names no shared modules"
    named = set(re.findall(r"`([a-z_]+)\.py`", shared.group(1)))
    assert named == {name.rsplit(".", 1)[1] for name in SHARED}


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found
