"""Install test extension packages into a throwaway site dir a daemon can discover.

A real ``pip install`` is not available to tests (no network, no package builds), so
this does the part of an install that entry-point discovery relies on: it copies the
package's import packages (and top-level modules) into ``site_dir`` and writes a
``<name>-<version>.dist-info`` with ``METADATA`` and ``entry_points.txt`` taken from the
package's ``pyproject.toml``. A daemon started with ``site_env(site_dir)`` in its
environment (``DaemonProcess(extra_env=...)``) then finds the package's entry points
through ``importlib.metadata`` exactly as it would after a real install.

Usage::

    site = tmp_path / "site"
    install_package(Path("tests/fixtures/extensions/middleware-probe"), site)
    daemon = DaemonProcess(root=..., models_dir=..., extra_env=site_env(site))
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import tomllib
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "extensions"

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def _normalized(name: str) -> str:
    """The dist-info file-name form of a distribution name (PEP 427/503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _import_roots(source: Path) -> list[Path]:
    """The import packages and top-level modules of a source tree (flat or ``src/``)."""
    base = source / "src" if (source / "src").is_dir() else source
    roots: list[Path] = []
    for entry in sorted(base.iterdir()):
        package = entry.is_dir() and (entry / "__init__.py").is_file()
        module = entry.is_file() and entry.suffix == ".py" and entry.name != "setup.py"
        if package or module:
            roots.append(entry)
    return roots


def _metadata(project: dict[str, Any]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    lines.extend(f"Requires-Dist: {dep}" for dep in project.get("dependencies", []))
    return "\n".join(lines) + "\n"


def _entry_points(project: dict[str, Any]) -> str:
    groups: dict[str, dict[str, str]] = dict(project.get("entry-points", {}))
    if "scripts" in project:
        groups["console_scripts"] = project["scripts"]
    sections = []
    for group, entries in groups.items():
        body = "".join(f"{name} = {target}\n" for name, target in entries.items())
        sections.append(f"[{group}]\n{body}")
    return "\n".join(sections)


def install_package(source: Path, site_dir: Path) -> Path:
    """Install the package at ``source`` into ``site_dir``; returns its dist-info dir.

    ``source`` holds a ``pyproject.toml`` with a ``[project]`` table (name, version,
    optional ``[project.entry-points.<group>]``) and the import package either beside it
    or under ``src/``. Installing the same package twice replaces the first copy.
    """
    project: dict[str, Any] = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    site_dir.mkdir(parents=True, exist_ok=True)
    roots = _import_roots(source)
    if not roots:
        raise ValueError(f"{source} has no import package or module to install")
    for root in roots:
        target = site_dir / root.name
        if target.is_dir():
            shutil.rmtree(target)
        if root.is_dir():
            shutil.copytree(root, target, ignore=_IGNORED)
        else:
            shutil.copy2(root, target)
    dist_info = site_dir / f"{_normalized(project['name'])}-{project['version']}.dist-info"
    if dist_info.is_dir():
        shutil.rmtree(dist_info)
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(_metadata(project))
    (dist_info / "entry_points.txt").write_text(_entry_points(project))
    (dist_info / "INSTALLER").write_text("skulk-tests\n")
    (dist_info / "RECORD").write_text(
        "".join(f"{root.name},,\n" for root in roots) + f"{dist_info.name}/METADATA,,\n"
    )
    (dist_info / "top_level.txt").write_text(
        "".join(f"{root.stem if root.is_file() else root.name}\n" for root in roots)
    )
    return dist_info


def install_fixture(name: str, site_dir: Path) -> Path:
    """Install ``tests/fixtures/extensions/<name>`` into ``site_dir``."""
    return install_package(FIXTURES / name, site_dir)


def site_env(*site_dirs: Path, **extra: str) -> dict[str, str]:
    """Environment for ``DaemonProcess.extra_env`` putting ``site_dirs`` on the path.

    The existing ``PYTHONPATH`` (if any) is kept after the site dirs; ``extra`` adds more
    variables (for example a probe's output path).
    """
    parts = [str(d) for d in site_dirs]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(parts), **extra}


def read_records(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The JSON-lines records a test extension wrote to ``path`` (of one ``kind``)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if kind is None or r.get("kind") == kind]


def wait_record(path: Path, kind: str, timeout: float = 30.0, **match: object) -> dict[str, Any]:
    """The first record of ``kind`` whose fields equal ``match``, waiting for it."""
    deadline = time.monotonic() + timeout
    while True:
        for record in read_records(path, kind):
            if all(record.get(key) == value for key, value in match.items()):
                return record
        if time.monotonic() > deadline:
            raise AssertionError(f"no {kind} record matching {match} in {path}")
        time.sleep(0.1)
