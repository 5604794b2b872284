"""Removing the manager runtime generations nothing uses any more.

Each generation is a full copy of a Skulk environment (about a gigabyte), so once a
manager has attached on the generation selected for the host's build, the host keeps:

- the selected generation (``current``);
- every generation a running manager still starts from (``running``: what the manager
  answering on the root reports, since one manager serves a root);
- the newest other complete generation (by its completion time), for going back to the
  previous build by hand;

and removes the rest, interrupted (incomplete) copies included: staging never activates
them. Removal holds the runtimes fence that staging holds and never waits for it, so a
copy in progress is never touched and a busy fence defers removal (``None``). A
generation is renamed out of the way (``.removing-<name>``) before it is deleted, so an
interrupted removal never leaves a partial copy under a generation's name; the next
collection finishes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from skulk_host.files import fsync_dir
from skulk_host.plugin_service.runtime import (
    GENERATION_PATTERN,
    fence,
    read_completion,
    runtimes,
    selected,
)

REMOVING_PREFIX: Final = ".removing-"


@dataclass(frozen=True, slots=True)
class Collected:
    kept: tuple[str, ...]
    removed: tuple[str, ...]


def _generations(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(
        path
        for path in directory.iterdir()
        if re.fullmatch(GENERATION_PATTERN, path.name) and path.is_dir() and not path.is_symlink()
    )


def keep_set(service_root: Path, running: Iterable[str]) -> set[str]:
    """The generations :func:`collect` keeps (see the module docstring)."""
    keep = set(running)
    current = selected(service_root)
    if current is not None:
        keep.add(current)
    others = []
    for path in _generations(runtimes(service_root)):
        completion = read_completion(path)
        if path.name not in keep and completion is not None and completion.generation == path.name:
            others.append((completion.completed_at, path.name))
    if others:
        keep.add(max(others)[1])
    return keep


def collect(service_root: Path, running: Iterable[str]) -> Collected | None:
    """Remove every generation outside :func:`keep_set`; ``None`` when the fence is busy."""
    running = set(running)
    with fence(service_root, wait=False) as held:
        if not held:
            return None
        keep = keep_set(service_root, running)
        removed = []
        for path in _generations(runtimes(service_root)):
            if path.name not in keep:
                _remove(path)
                removed.append(path.name)
        _finish_removals(runtimes(service_root))
        return Collected(tuple(sorted(keep)), tuple(removed))


def discard(service_root: Path, generation: str, running: Iterable[str]) -> bool:
    """Remove one unselected generation (a refused candidate) under the fence; never the
    selected one or one a manager runs. Whether it was removed."""
    with fence(service_root, wait=False) as held:
        if not held or generation == selected(service_root) or generation in set(running):
            return False
        path = runtimes(service_root) / generation
        if re.fullmatch(GENERATION_PATTERN, generation) is None or not path.is_dir():
            return False
        _remove(path)
        _finish_removals(runtimes(service_root))
        return True


def _remove(path: Path) -> None:
    aside = path.with_name(f"{REMOVING_PREFIX}{path.name}.{secrets.token_hex(4)}")
    os.rename(path, aside)
    fsync_dir(path.parent)
    _delete(aside)


def _finish_removals(directory: Path) -> None:
    for leftover in directory.iterdir():
        if leftover.name.startswith(REMOVING_PREFIX) and not leftover.is_symlink():
            _delete(leftover)


def _delete(path: Path) -> None:
    # NOTE: a copied package may hold a directory without write permission; its
    # entries can only go once it is writable again (nothing inside is followed).
    with contextlib.suppress(OSError):
        path.chmod(0o700)
    for current, dirnames, _ in os.walk(path, followlinks=False):
        for name in dirnames:
            inner = Path(current) / name
            if not inner.is_symlink():
                with contextlib.suppress(OSError):
                    inner.chmod(0o700)
    shutil.rmtree(path)
