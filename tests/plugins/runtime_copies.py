"""Sealed copies of a staged manager runtime, made of hard links.

Staging copies the whole environment it runs in (the lean one, ``lean_environment.py``),
so the suite stages for real once per session (per xdist worker: ``session_runtime`` in
``conftest.py``). A module that needs a staged runtime only to exist (setup reusing it,
a manager serving from it) gets a sealed copy of that generation in its own service
root: every sealed file a hard link (no bytes copied), except the few whose bytes name
the generation's own path (the console scripts' ``#!`` line, ``pyvenv.cfg``), which are
rewritten for the copy, exactly as staging there would have written them. The copy keeps
the source's ``source_sha256``, so ``skulk-plugin-service setup`` in that root verifies
it and reuses it, as it reuses its own earlier staging.

A hard link shares its bytes and mode with the session's staging: a test that changes a
sealed file in place (tampering, a mode change) first gives it an inode of its own with
:func:`own`. Renaming, deleting and adding files need nothing.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from skulk_host.files import atomic_write
from skulk_host.plugin_service.runtime import (
    COMPLETE_FILE,
    SEAL_FILE,
    Completion,
    Seal,
    build_identity,
    fence,
    measure,
    read_seal,
    seal_digest,
)

SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
PATH_BOUND = ("pyvenv.cfg", "bin/")
"""The members whose bytes name the generation's own path (scripts' ``#!`` lines)."""


def own(path: Path) -> None:
    """Give ``path`` an inode of its own (same bytes, same mode), so that changing it in
    place changes no hard-linked copy of it."""
    mode = stat.S_IMODE(path.stat().st_mode)
    aside = path.with_name(f".{path.name}.own")
    aside.write_bytes(path.read_bytes())
    aside.chmod(mode)
    os.replace(aside, path)


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        shutil.copy2(source, target)  # another filesystem: bytes, then the same mode


def sealed_copy(
    source: Path,
    service_root: Path,
    *,
    edits: Mapping[str, Callable[[str], str]] | None = None,
    source_sha256: str | None = None,
    completed_at: int | None = None,
) -> Completion:
    """A complete, sealed generation in ``service_root`` holding what ``source`` seals.

    ``edits`` change named members (relative paths; a changed Skulk file makes another
    build); ``source_sha256`` replaces the source's (``None``: setup there reuses it)."""
    edits = dict(edits or {})
    seal = read_seal(source)
    name = os.urandom(8).hex()
    with fence(service_root):
        target = service_root / "runtimes" / name
        target.mkdir(mode=0o700)
        old, new = str(source).encode(), str(target).encode()
        for relative in sorted(seal.dirs):
            (target / relative).mkdir()
        for relative, points_to in seal.links.items():
            os.symlink(points_to.replace(str(source), str(target)), target / relative)
        rewritten: set[str] = set()
        for relative, (_, _, mode) in seal.files.items():
            path = target / relative
            if relative in edits or relative.startswith(PATH_BOUND):
                data = (source / relative).read_bytes()
                changed = data.replace(old, new)
                if relative in edits:
                    changed = edits[relative](changed.decode()).encode()
                    assert changed != data, f"the edit changed nothing in {relative}"
                if changed != data:
                    path.write_bytes(changed)
                    path.chmod(mode)
                    rewritten.add(relative)
                    continue
            _link(source / relative, path)
        # NOTE: modes last, deepest first: a sealed read-only directory takes no links.
        for relative in sorted(seal.dirs, reverse=True):
            (target / relative).chmod(seal.dirs[relative])
        known = {p: (sha, size) for p, (sha, size, _) in seal.files.items() if p not in rewritten}
        files, dirs, links = measure(target, known)
        build = build_identity(target / SITE) if edits else seal.build_sha256
        copied = Seal(
            generation=name,
            python=seal.python,
            interpreter=seal.interpreter,
            build_sha256=build,
            source_sha256=source_sha256 or seal.source_sha256,
            files=files,
            dirs=dirs,
            links=links,
        )
        atomic_write(target / SEAL_FILE, msgspec.json.encode(copied), mode=0o400)
        completion = Completion(
            generation=name,
            seal_sha256=seal_digest(copied),
            build_sha256=build,
            source_sha256=copied.source_sha256,
            files=len(files),
            bytes=sum(size for _, size, _ in files.values()),
            completed_at=int(time.time()) if completed_at is None else completed_at,
        )
        atomic_write(target / COMPLETE_FILE, msgspec.json.encode(completion), mode=0o400)
    return completion


@dataclass(frozen=True)
class SessionRuntime:
    """The session's one real ``skulk-plugin-service setup`` (a staged, selected
    generation of this environment) and what it printed."""

    base: Path
    env: dict[str, str]
    done: subprocess.CompletedProcess[str]
    seconds: float
    generation: Path
    """The generation setup staged; its sealed files are the source of every copy."""
    python: Path
    """The interpreter setup ran from (the lean environment's): a later setup over a
    copy runs from it too, or it would find another source and stage that instead."""

    @property
    def root(self) -> Path:
        return self.base / "service"

    def copy_into(self, service_root: Path) -> str:
        """A sealed copy of the staged generation in ``service_root`` (hard links), which
        setup there verifies and reuses instead of staging again; its name."""
        return sealed_copy(self.generation, service_root).generation
