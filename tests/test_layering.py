"""The dependency direction: skulk_cli -> (HTTP) -> skulk_daemon -> skulk_core, and
inside the daemon, the HTTP layer on top of services that never reach back up.

Imports are read from the source (every ``import``, including those under
``TYPE_CHECKING`` and inside functions: a type-only cycle is still a cycle to read).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("skulk_core", "skulk_daemon", "skulk_cli")
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
LONG_CLASSES_ALLOWED = {
    # The plugin API typed-forwarder work removes it.
    "skulk_daemon.api.plugins.PluginsController",
}
PRODUCT_PACKAGES = tuple(
    package
    for package in (*PACKAGES, "skulk", "skulk_host")
    if (ROOT / package).is_dir()  # skulk_host: where the plugin host moves to
)


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
    "skulk_daemon.plugins.manager.cli",
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


def test_the_cycle_check_finds_a_cycle() -> None:
    assert list(_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]


def test_no_product_module_is_too_long() -> None:
    long = {
        name: lines
        for name, path in _modules().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


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
    long = {
        name: lines
        for name, lines in lengths.items()
        if lines > MAX_CLASS_LINES and name not in LONG_CLASSES_ALLOWED
    }
    assert long == {}
    # An allowance for a class that no longer exists (or has been split) is stale.
    assert lengths.keys() >= LONG_CLASSES_ALLOWED


def test_the_class_check_sees_classes() -> None:
    assert len(_class_lengths()) > 100


@pytest.mark.parametrize("package", PACKAGES)
def test_the_check_sees_imports(package: str) -> None:
    # Guard against a scan that silently finds nothing (a moved package, a bad glob).
    assert _imports(package), f"no imports found in {package}"
