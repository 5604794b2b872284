"""The dependency direction: skulk_cli -> (HTTP) -> skulk_daemon -> skulk_core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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


def _imports(package: str) -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.lineno, node.module))
    return found


def _violations(package: str, forbidden: set[str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path, line, module in _imports(package)
        if module.split(".")[0] in forbidden
    ]


def test_core_is_pure() -> None:
    assert _violations("skulk_core", FRAMEWORKS | {"skulk_daemon", "skulk_cli"}) == []


def test_cli_never_imports_the_daemon() -> None:
    assert _violations("skulk_cli", {"skulk_daemon", "litestar", "uvicorn", "zmq"}) == []


def test_daemon_never_imports_the_cli() -> None:
    assert _violations("skulk_daemon", {"skulk_cli", "typer"}) == []


@pytest.mark.parametrize("package", ["skulk_core", "skulk_daemon", "skulk_cli"])
def test_the_check_sees_imports(package: str) -> None:
    # Guard against a scan that silently finds nothing (a moved package, a bad glob).
    assert _imports(package), f"no imports found in {package}"
