"""The seal over a staged runtime (and its extracted bundle archive): its exact file
membership, bytes, permissions and interpreter target, measured once at completion and
checked before it ever runs.

:func:`measure` walks a directory without following links: each regular file by
SHA-256, size and permission bits, each directory by its permission bits, each link
by its target (so ``bin/python`` pins the interpreter). The seal digest is the SHA-256
of the canonical JSON of that manifest. An added startup file, a changed dependency, a
widened permission or a moved interpreter changes it; :func:`check` refuses then, and
nothing here ever re-seals changed files. The regular files a desktop browser leaves
(``.DS_Store``, AppleDouble ``._*``) are not part of the seal; a link or directory under
one of those names still is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Final

from skulk_core.plugins.canonical import canonical_sha256
from skulk_core.plugins.errors import refuse
from skulk_host.plugin_service.bootstrap import file_sha256, ignored

SEAL_VERSION: Final = 1


def measure(root: Path) -> dict[str, Any]:
    """The seal manifest of everything under ``root``."""
    files: dict[str, list[object]] = {}
    dirs: dict[str, int] = {}
    links: dict[str, str] = {}
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(current)
        for name in sorted(dirnames + filenames):
            path = base / name
            info = path.lstat()
            relative = path.relative_to(root).as_posix()
            if ignored(name, info.st_mode):
                continue
            if stat.S_ISLNK(info.st_mode):
                links[relative] = os.readlink(path)
            elif stat.S_ISDIR(info.st_mode):
                dirs[relative] = stat.S_IMODE(info.st_mode)
            elif stat.S_ISREG(info.st_mode):
                files[relative] = [file_sha256(path), info.st_size, stat.S_IMODE(info.st_mode)]
            else:
                raise refuse(
                    "seal_mismatch", f"The staged runtime holds a special file: {relative}."
                )
    return {"version": SEAL_VERSION, "files": files, "dirs": dirs, "links": links}


def digest(manifest: dict[str, Any]) -> str:
    return canonical_sha256(manifest)


def check(root: Path, expected: str, what: str = "runtime") -> None:
    """Refuse unless ``root`` measures exactly to the seal ``expected``; ``what`` names
    the sealed tree in the refusal (the staged ``runtime``, its ``bundle``)."""
    if not root.is_dir() or root.is_symlink():
        raise refuse("seal_mismatch", f"The staged {what} is missing: recover it explicitly.")
    if digest(measure(root)) != expected:
        raise refuse(
            "seal_mismatch",
            f"The staged {what} no longer matches its seal: it will not run; recover it "
            "explicitly.",
        )
