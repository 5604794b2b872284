"""``GET /filesystem/browse``: the child directories a configuration picker may offer.

Only directories beneath :data:`ALLOWED_ROOTS` are listed, checked after symlinks are
resolved (``/tmp/link -> /etc`` is outside). Names only: no file is read, and hidden
entries are left out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import msgspec

from skulk_daemon.errors import ApiError, bad_request

ALLOWED_ROOTS: Final = ("/Volumes", "/home", "/mnt", "/tmp", "/opt")
DEFAULT_BROWSE_PATH: Final = "/Volumes"
MAX_PATH_CHARS: Final = 4096
"""Linux's PATH_MAX; no real directory has a longer name."""
MAX_DIRECTORIES: Final = 10_000
"""At most this many children are listed (``truncated`` says when there were more)."""


class DirectoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    path: str


class DirectoryListing(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    """The resolved path that was listed."""
    directories: tuple[DirectoryEntry, ...]
    truncated: bool = False


def _roots() -> list[Path]:
    # A root may itself be a link (/tmp -> /private/tmp on macOS): both forms count.
    found: list[Path] = []
    for root in ALLOWED_ROOTS:
        for form in (Path(root), Path(os.path.realpath(root))):
            if form not in found:
                found.append(form)
    return found


def _allowed(resolved: Path) -> bool:
    return any(resolved == root or root in resolved.parents for root in _roots())


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: undecodable bytes
        return False
    return True


def _forbidden(path: Path) -> ApiError:
    return ApiError(
        403, f"{path}: permission denied; the node cannot list it", code="permission_denied"
    )


def browse(raw: str) -> DirectoryListing:
    """The sorted, non-hidden child directories of ``raw``, after resolving it."""
    if not raw or len(raw) > MAX_PATH_CHARS or "\x00" in raw or not _utf8(raw):
        raise bad_request(
            f"path must be an absolute path of 1 to {MAX_PATH_CHARS} characters",
            code="invalid_path",
        )
    path = Path(raw)
    if not path.is_absolute():
        raise bad_request(f"{raw!r} is not an absolute path", code="invalid_path")
    try:
        resolved = path.resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise bad_request(f"{raw!r} cannot be resolved: {exc}", code="invalid_path") from None
    if not _allowed(resolved):
        raise bad_request(
            f"{resolved} is outside the directories that may be browsed "
            f"({', '.join(ALLOWED_ROOTS)})",
            code="path_not_allowed",
        )
    try:
        is_dir = resolved.is_dir()
    except PermissionError:
        raise _forbidden(resolved) from None
    except OSError:
        is_dir = False
    if not is_dir:
        raise bad_request(f"{resolved} is not a directory", code="not_a_directory")
    directories: list[DirectoryEntry] = []
    truncated = False
    try:
        with os.scandir(resolved) as entries:
            for entry in entries:
                # A name that is not UTF-8 cannot be shown in JSON, nor browsed back.
                if entry.name.startswith(".") or not _utf8(entry.name):
                    continue
                try:
                    if not entry.is_dir():  # follows links: a link to a directory is one
                        continue
                except OSError:
                    continue
                if len(directories) == MAX_DIRECTORIES:
                    truncated = True
                    break
                directories.append(DirectoryEntry(name=entry.name, path=str(resolved / entry.name)))
    except PermissionError:
        raise _forbidden(resolved) from None
    except OSError as exc:
        raise bad_request(
            f"{resolved} cannot be listed: {exc.strerror}", code="not_a_directory"
        ) from None
    directories.sort(key=lambda d: d.name)
    return DirectoryListing(path=str(resolved), directories=tuple(directories), truncated=truncated)
