"""The dependency direction: skulk_cli -> (HTTP) -> skulk_daemon -> skulk_core, and
inside the daemon, the HTTP layer on top of services that never reach back up;
skulk_host (host-local programs and protected files) sits on skulk_core, below both the
CLI and the daemon, and skulk_core performs no file or process effect; no import cycle
between modules, nor between the first-level folders of a package.

Imports are read from the source (every ``import``, including those under
``TYPE_CHECKING`` and inside functions: a type-only cycle is still a cycle to read).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("skulk_core", "skulk_daemon", "skulk_cli", "skulk_host")
FRAMEWORKS = {
    "litestar",
    "zmq",
    "httpx",
    "typer",
    "rich",
    "llama_cpp",
    "mlx",
    "mlx_lm",
    "uvicorn",
    "psutil",
}
MAX_MODULE_LINES = 600
"""No product module grows past this; split it by what it owns instead."""
MAX_CLASS_LINES = 350
"""A class past this usually owns two things: split it into collaborators it composes."""
PRODUCT_PACKAGES = (*PACKAGES, "skulk")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


@cache
def _imports(package: str) -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.lineno, node.module))
                # `from pkg import module` imports the module too.
                found += [
                    (path, node.lineno, f"{node.module}.{alias.name}")
                    for alias in node.names
                    if f"{node.module}.{alias.name}" in _modules()
                ]
    return found


def _violations(package: str, forbidden: set[str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path, line, module in _imports(package)
        if module.split(".")[0] in forbidden
    ]


def _reaches(sources: str, targets: str) -> list[str]:
    """Imports from modules under ``sources`` of modules under ``targets`` (dotted)."""
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for package in PACKAGES
        for path, line, module in _imports(package)
        if _under(_module_name(path), sources) and _under(module, targets)
    ]


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_core_is_pure() -> None:
    assert _violations("skulk_core", FRAMEWORKS | {"skulk_daemon", "skulk_cli"}) == []


def test_cli_never_imports_the_daemon() -> None:
    assert _violations("skulk_cli", {"skulk_daemon", "litestar", "uvicorn", "zmq"}) == []


def test_daemon_never_imports_the_cli() -> None:
    assert _violations("skulk_daemon", {"skulk_cli", "typer"}) == []


# Services own their logic and refusal types below the HTTP layer; only serve.py (which
# builds the app) and the API itself import skulk_daemon.api.
BELOW_THE_API = [
    "skulk_daemon.chat",
    "skulk_daemon.embeddings",
    "skulk_daemon.placement",
    "skulk_daemon.operator",
    "skulk_daemon.extensions",
    "skulk_daemon.capabilities",
    "skulk_daemon.plugins",
    "skulk_daemon.providers",
    "skulk_daemon.fabric",
    "skulk_daemon.node",
    "skulk_daemon.worker",
    "skulk_daemon.runner",
    "skulk_daemon.engines",
    "skulk_daemon.models",
    "skulk_daemon.browser",
    "skulk_daemon.telemetry",
    "skulk_daemon.system",
    "skulk_daemon.errors",
    "skulk_daemon.services",
]


@pytest.mark.parametrize("package", BELOW_THE_API)
def test_services_never_import_the_http_layer(package: str) -> None:
    assert _reaches(package, "skulk_daemon.api") == []


def test_services_are_free_of_the_web_framework() -> None:
    # Refusals are plain exceptions (skulk_daemon.errors); only api/, the operator
    # listener with its ASGI guards (a server of its own) and the server's own bounds
    # know Litestar or uvicorn.
    allowed = (
        "skulk_daemon.api",
        "skulk_daemon.system.http_server",
        "skulk_daemon.operator.listener",
        "skulk_daemon.operator.guards",
        "skulk_daemon.store.listener",
        "skulk_daemon.store.transport",
        "skulk_daemon.serve",
    )
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path, line, module in _imports("skulk_daemon")
        if module.split(".")[0] in {"litestar", "uvicorn"}
        and not any(_under(_module_name(path), prefix) for prefix in allowed)
    ]
    assert found == []


# The public plugin surface (``skulk/``) is re-exports over the real modules: it may
# import skulk_core, the daemon's public extension package and the manager's command
# (the spec's ``python -m skulk.extensions.runtime_manager``), nothing else of the
# daemon, no framework and never the CLI; nothing inside Skulk imports it back.
PUBLIC_SURFACE_MAY_IMPORT = (
    "skulk",
    "skulk_core",
    "skulk_daemon.extensions",
    "skulk_host.plugin_manager.cli",
    "__future__",
    "sys",
)


def test_public_surface_only_reexports_public_modules() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path, line, module in _imports("skulk")
        if not any(_under(module, allowed) for allowed in PUBLIC_SURFACE_MAY_IMPORT)
    ]
    assert _imports("skulk"), "no imports found in skulk"
    assert found == []


@pytest.mark.parametrize("package", PACKAGES)
def test_nothing_inside_skulk_imports_the_public_surface(package: str) -> None:
    assert _violations(package, {"skulk"}) == []


def test_chat_never_imports_extensions() -> None:
    # Extensions hook into chat through the protocol chat defines (chat/hooks.py).
    assert _reaches("skulk_daemon.chat", "skulk_daemon.extensions") == []


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for package in PACKAGES:
        for path, _, module in _imports(package):
            if module in modules and module != _module_name(path):
                graph[_module_name(path)].add(module)
    return graph


def _cycles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0

    def visit(start: str) -> Iterator[list[str]]:
        nonlocal counter
        # Iterative, so a deep import chain cannot hit the recursion limit.
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
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
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    yield sorted(component)

    for name in sorted(graph):
        if name not in index:
            yield from visit(name)


def _is_package_init(module: str) -> bool:
    return _modules()[module].name == "__init__.py"


def test_no_import_cycle() -> None:
    # A package's __init__ that re-exports its modules is imported by them only through
    # Python's parent-package rule, not by choice; leave those edges out.
    graph = {
        name: {
            target for target in targets if not (_is_package_init(target) and _under(name, target))
        }
        for name, targets in _graph().items()
    }
    assert list(_cycles(graph)) == []


def _folder(module: str) -> str:
    """The first-level folder (sub-package or top-level module) ``module`` lies in."""
    return ".".join(module.split(".")[:2])


def _folder_arrows(package: str) -> dict[tuple[str, str], str]:
    """Each import from one first-level folder of ``package`` into another, every
    import counted, with the first place it is made (``path:line``)."""
    folders = {_folder(name) for name in _modules() if _under(name, package) and name != package}
    arrows: dict[tuple[str, str], str] = {}
    for path, line, module in _imports(package):
        source, target = _folder(_module_name(path)), _folder(module)
        if source in folders and target in folders and source != target:
            arrows.setdefault((source, target), f"{path.relative_to(ROOT)}:{line}")
    return arrows


def _folder_graph(package: str) -> dict[str, set[str]]:
    folders = {_folder(name) for name in _modules() if _under(name, package) and name != package}
    graph: dict[str, set[str]] = {folder: set() for folder in folders}
    for source, target in _folder_arrows(package):
        graph[source].add(target)
    return graph


def _shortest_loop(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest loop from ``start`` back to it, as ``[start, ..., start]``."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    return None


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """For every folder on a cycle, a shortest loop through it (each loop named once,
    starting from its least member): one import knot can hold several loops."""
    found: set[tuple[str, ...]] = set()
    for component in _cycles(graph):
        for member in component:
            loop = _shortest_loop(graph, member)
            assert loop is not None  # a member of a strongly connected component
            ring = loop[:-1]
            first = ring.index(min(ring))
            found.add(tuple(ring[first:] + ring[:first]))
    return [[*ring, ring[0]] for ring in sorted(found)]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_folders(package: str) -> None:
    # A folder is a sub-package or a top-level module. Two folders that import each
    # other (even through a type-only or function-level import) are one layer in
    # two places: move what they share down, or let the lower one take a Protocol.
    graph = _folder_graph(package)
    assert len(graph) > 1, f"no folders found in {package}"
    arrows = _folder_arrows(package)
    loops = [
        " -> ".join(loop) + " (" + ", ".join(arrows[step] for step in pairwise(loop)) + ")"
        for loop in _loops(graph)
    ]
    assert not loops, "import loops between folders:\n" + "\n".join(loops)


def test_the_folder_loop_check_names_every_loop() -> None:
    # One knot, two loops through "b", and a folder that only leads into it.
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"b"}, "d": {"a"}}
    assert _loops(graph) == [["a", "b", "a"], ["b", "c", "b"]]
    assert _folder("skulk_daemon.runner.host") == "skulk_daemon.runner"
    assert _folder("skulk_daemon.errors") == "skulk_daemon.errors"


# Arrows the import-plan review found running back up, each now cut by a move or a
# Protocol the lower folder declares. No loop has to form for one of them to return.
LOWER_NEVER_REACHES_UP = [
    ("skulk_daemon.errors", "skulk_daemon"),
    ("skulk_daemon.runner", "skulk_daemon.fabric"),
    ("skulk_daemon.runner", "skulk_daemon.speech"),
    ("skulk_daemon.hub", "skulk_daemon.diagnostics"),
    ("skulk_daemon.node_admin", "skulk_daemon.diagnostics"),
    ("skulk_daemon.diagnostics", "skulk_daemon.capabilities"),
    ("skulk_daemon.diagnostics", "skulk_daemon.fabric"),
    ("skulk_daemon.plugins", "skulk_daemon.extensions"),
]


@pytest.mark.parametrize(("lower", "upper"), LOWER_NEVER_REACHES_UP)
def test_lower_folders_never_reach_up(lower: str, upper: str) -> None:
    assert _reaches(lower, upper) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert list(_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]


def test_no_product_module_is_too_long() -> None:
    long = {
        name: lines
        for name, path in _modules().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


# skulk_core decides; what touches the file system or runs a program lives in skulk_host
# (or the daemon). A module, not only a call, counts: importing one of these is the effect.
CORE_FORBIDDEN_MODULES = {"subprocess", "shutil", "fcntl", "socket", "tempfile"}
OS_FILE_EFFECTS = {
    "replace",
    "rename",
    "remove",
    "unlink",
    "mkdir",
    "makedirs",
    "rmdir",
    "open",
    "fsync",
    "chmod",
    "write",
}
PATH_FILE_EFFECTS = {
    "write_text",
    "write_bytes",
    "unlink",
    "mkdir",
    "rmdir",
    "rename",
    "replace",
    "touch",
    "chmod",
}


def _writes_a_file(call: ast.Call) -> bool:
    """``open(path, mode)`` with a mode that writes, appends or creates."""
    mode = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg == "mode":
            mode = keyword.value
    if mode is None:
        return False
    if not isinstance(mode, ast.Constant) or not isinstance(mode.value, str):
        return True  # a mode computed at run time may write
    return any(flag in mode.value for flag in "wax+")


def _path_call(method: str, call: ast.Call) -> bool:
    """Whether ``x.method(...)`` can be ``Path.method``: ``str.replace(old, new)`` and
    ``msgspec.structs.replace(obj, field=...)`` take more than ``Path.replace(target)``."""
    if method in {"rename", "replace"}:
        return len(call.args) == 1 and not call.keywords
    return True


def _effects_in(tree: ast.AST, where: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        at = f"{where}:{node.lineno}"
        if isinstance(function, ast.Attribute):
            owner = function.value
            if isinstance(owner, ast.Name) and owner.id == "os":
                if function.attr in OS_FILE_EFFECTS:
                    found.append(f"{at} calls os.{function.attr}")
            elif function.attr in PATH_FILE_EFFECTS and _path_call(function.attr, node):
                found.append(f"{at} calls .{function.attr}()")
        elif isinstance(function, ast.Name) and function.id == "open" and _writes_a_file(node):
            found.append(f"{at} opens a file to write")
    return found


def _file_effects(package: str) -> list[str]:
    return [
        effect
        for path in sorted((ROOT / package).rglob("*.py"))
        for effect in _effects_in(
            ast.parse(path.read_text(encoding="utf-8"), filename=str(path)),
            str(path.relative_to(ROOT)),
        )
    ]


def test_core_runs_no_program_and_touches_no_file() -> None:
    assert _violations("skulk_core", CORE_FORBIDDEN_MODULES) == []
    assert _file_effects("skulk_core") == []


def test_the_file_effect_check_sees_effects() -> None:
    sample = (
        "os.replace(a, b)\n"
        "p.write_text('x')\n"
        "open(p, 'w')\n"
        "open(p, mode='rb')\n"
        "open(p)\n"
        "os.path.join(a, b)\n"
        "os.fsync(fd)\n"
        "name.replace('-', '_')\n"
        "structs.replace(card, ready=True)\n"
        "tmp.replace(path)\n"
    )
    assert _effects_in(ast.parse(sample), "m.py") == [
        "m.py:1 calls os.replace",
        "m.py:2 calls .write_text()",
        "m.py:3 opens a file to write",
        "m.py:7 calls os.fsync",
        "m.py:10 calls .replace()",
    ]


def test_host_programs_never_import_the_daemon_or_a_framework() -> None:
    # skulk_host runs outside the node process (the plugin manager, its staging) and
    # holds the protected files both the CLI and the daemon touch.
    forbidden = {"skulk_daemon", "skulk_cli", "litestar", "uvicorn", "typer", "rich"}
    assert _violations("skulk_host", forbidden) == []


def test_core_never_imports_the_host_package() -> None:
    assert _violations("skulk_core", {"skulk_host"}) == []


def _class_lengths() -> dict[str, int]:
    lengths = {}
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            module = _module_name(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    lengths[f"{module}.{node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_product_class_is_too_long() -> None:
    lengths = _class_lengths()
    long = {name: lines for name, lines in lengths.items() if lines > MAX_CLASS_LINES}
    assert long == {}


def test_the_class_check_sees_classes() -> None:
    assert len(_class_lengths()) > 100


@pytest.mark.parametrize("package", PACKAGES)
def test_the_check_sees_imports(package: str) -> None:
    # Guard against a scan that silently finds nothing (a moved package, a bad glob).
    assert _imports(package), f"no imports found in {package}"
