"""The offline installers a generation can be staged with: ``uv`` or the stdlib + pip.

Both install exactly the signed wheels, by local path and pinned SHA-256, into a
separate virtual environment made from the base interpreter: no index, no network,
no dependency resolution, no source builds, no cache shared with anything else, and
nothing changed in Skulk's own environment. Each returns argv lists; the stager runs
them with a scrubbed environment and keeps their bounded output as evidence.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


def base_python() -> str:
    """The interpreter a generation's environment is made from (not Skulk's venv)."""
    return getattr(sys, "_base_executable", None) or sys.executable


class Installer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def tooling(self) -> frozenset[str]:
        """Distributions the installer itself puts into the environment (pip's own)."""
        ...

    def create_environment(self, venv: Path) -> list[str]: ...

    def install(self, venv: Path, requirements: Path) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class UvInstaller:
    """``uv pip install --offline --no-index --no-deps --no-build --require-hashes``."""

    uv: str
    python: str = ""
    name: str = "uv"
    tooling: frozenset[str] = frozenset()

    def create_environment(self, venv: Path) -> list[str]:
        # NOTE: the stdlib venv without pip: uv installs into it from outside.
        return [self.python or base_python(), "-m", "venv", "--without-pip", str(venv)]

    def install(self, venv: Path, requirements: Path) -> list[str]:
        return [
            self.uv,
            "pip",
            "install",
            "--python",
            str(venv / "bin" / "python"),
            "--offline",
            "--no-index",
            "--no-deps",
            "--no-build",
            "--require-hashes",
            "--no-cache",
            "--no-config",
            "--link-mode",
            "copy",
            "-r",
            str(requirements),
        ]


@dataclass(frozen=True, slots=True)
class PipInstaller:
    """The stdlib route: ``python -m venv`` (pip from ``ensurepip``, offline) and
    ``pip install --no-index --no-deps --only-binary :all: --require-hashes``."""

    python: str = ""
    name: str = "pip"
    tooling: frozenset[str] = frozenset({"pip", "setuptools"})

    def create_environment(self, venv: Path) -> list[str]:
        return [self.python or base_python(), "-m", "venv", str(venv)]

    def install(self, venv: Path, requirements: Path) -> list[str]:
        return [
            str(venv / "bin" / "python"),
            "-I",
            "-B",
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--require-hashes",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-compile",
            "-r",
            str(requirements),
        ]


def default_installer() -> Installer:
    """``uv`` when it is on ``PATH``, else the stdlib + pip route."""
    uv = shutil.which("uv")
    return UvInstaller(uv=uv) if uv else PipInstaller()
