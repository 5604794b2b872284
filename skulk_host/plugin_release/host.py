"""This host's facts a release is judged against: artifact family, Python, Skulk build.

The artifact family is derived, not drawn from a list: operating system, C library
and processor architecture (``linux-glibc-x86_64``, ``linux-musl-aarch64``,
``macos-arm64``). The Skulk build digest is the SHA-256 of the canonical manifest of
Skulk's own Python sources (each file's relative path and SHA-256).
"""

from __future__ import annotations

import hashlib
import platform
from functools import cache
from pathlib import Path

from skulk_core.plugins.canonical import canonical_sha256
from skulk_core.plugins.documents import HostFacts

_PACKAGES = ("skulk", "skulk_core", "skulk_daemon", "skulk_cli", "skulk_host")
_MACHINES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "arm64", "aarch64": "aarch64"}


def artifact_family(system: str, libc: str, machine: str) -> str:
    machine = _MACHINES.get(machine.lower(), machine.lower())
    system = system.lower()
    if system == "darwin":
        return f"macos-{'arm64' if machine in ('arm64', 'aarch64') else machine}"
    if system == "linux":
        return f"linux-{'glibc' if libc.lower() == 'glibc' else libc.lower() or 'musl'}-{machine}"
    return f"{system}-{machine}"


@cache
def skulk_build_sha256() -> str:
    root = Path(__file__).resolve().parents[2]
    files = {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for package in _PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    }
    return canonical_sha256(files)


def host_facts() -> HostFacts:
    libc, _ = platform.libc_ver()
    return HostFacts(
        artifact_family=artifact_family(platform.system(), libc, platform.machine()),
        python_version=platform.python_version(),
        skulk_build_sha256=skulk_build_sha256(),
    )
