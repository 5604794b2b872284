"""A release's signed bundle archive: checked as data, then extracted into its generation.

The archive is a zip. It is refused unless every member is a plain relative path (no
absolute path, drive, backslash, control character, empty, ``.`` or ``..`` part), a
regular file or a directory (no symbolic or hard link, device, FIFO or socket), neither
encrypted nor compressed other than stored or deflated, named once (also once after
Unicode NFC case folding, so a case-insensitive file system cannot merge two members,
and never both a file and a directory), not a desktop-browser name the seal ignores
(``.DS_Store``, ``._*``), at most :data:`MAX_MEMBERS` members and
:data:`MAX_EXPANDED_BYTES` expanded in total. Every member is decompressed and its CRC
checked during inspection, counting the bytes actually produced (never trusting the
sizes the archive declares), so nothing is written for an archive that would be refused.

Extraction writes into a directory it creates, with fixed owner-only modes (the
archive's own modes are ignored), each file created exclusively without following
links. The extracted tree is then sealed with the generation (``seal.py``).

The shims are the fixed top-level files :data:`SHIMS`: ``__owner__.py``,
``__setup__.py``, ``__manage__.py``. A shim is loaded from its exact sealed file as the
module ``__owner__`` (say), with the bundle directory appended to the import path (after
Skulk's and the generation's ``site-packages``, so it shadows neither), and its
``main`` attribute is the launcher, as ``module:main`` would be for a wheel's entry.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import BinaryIO, Final, Literal

from skulk_core.plugins.errors import PluginRefusal, refuse

Kind = Literal["owner", "setup", "manage"]
KINDS: Final[tuple[Kind, ...]] = ("owner", "setup", "manage")
SHIMS: Final[dict[Kind, str]] = {
    "owner": "__owner__.py",
    "setup": "__setup__.py",
    "manage": "__manage__.py",
}
BUNDLE_DIR: Final = "bundle"
"""Where a generation's archive is extracted: ``<generation>/bundle/``."""
MAX_MEMBERS: Final = 4096
MAX_EXPANDED_BYTES: Final = 128 * 1024 * 1024
"""The whole archive expands to at most 128 MiB (counted as it is decompressed)."""
MAX_NAME_BYTES: Final = 1024
MAX_DEPTH: Final = 32
CHUNK_BYTES: Final = 1024 * 1024
_METHODS: Final = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})


@dataclass(frozen=True, slots=True)
class BundleFacts:
    filename: str
    files: int
    expanded_bytes: int
    shims: tuple[Kind, ...]
    """The launchers the archive carries (its top-level shim files)."""


def _unsafe(reason: str, filename: str) -> PluginRefusal:
    return refuse("unsafe_archive", f"The bundle archive {filename} is refused: {reason}.")


def _member_path(info: zipfile.ZipInfo, filename: str) -> PurePosixPath:
    name = info.filename
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind == stat.S_IFLNK:
        raise _unsafe(f"member {name!r} is a symbolic link", filename)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise _unsafe(f"member {name!r} is not a regular file or directory", filename)
    if info.flag_bits & 0x1:
        raise _unsafe(f"member {name!r} is encrypted", filename)
    if info.compress_type not in _METHODS:
        raise _unsafe(f"member {name!r} uses an unsupported compression", filename)
    if len(name.encode()) > MAX_NAME_BYTES or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise _unsafe(f"member {name!r} has an unusable name", filename)
    if "\\" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _unsafe(f"member {name!r} is not a relative archive path", filename)
    raw_parts = name.removesuffix("/").split("/")
    if any(part in ("", ".", "..") for part in raw_parts):
        raise _unsafe(f"member {name!r} escapes the archive", filename)
    if len(raw_parts) > MAX_DEPTH:
        raise _unsafe(f"member {name!r} is nested too deeply", filename)
    leaf = raw_parts[-1]
    if leaf == ".DS_Store" or leaf.startswith("._"):
        raise _unsafe(f"member {name!r} is a name the seal does not cover", filename)
    if kind == stat.S_IFDIR and not info.is_dir():
        raise _unsafe(f"member {name!r} is a directory named as a file", filename)
    return PurePosixPath(*raw_parts)


def _fold(path: PurePosixPath) -> str:
    return unicodedata.normalize("NFC", path.as_posix()).casefold()


def _members(
    archive: zipfile.ZipFile, filename: str
) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _unsafe(f"it has more than {MAX_MEMBERS} members", filename)
    members: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
    spelled: dict[str, str] = {}
    """Each case-folded path (members and their parents) to its one spelling."""
    named: set[str] = set()
    files: set[str] = set()
    dirs: set[str] = set()
    declared = 0
    for info in infos:
        path = _member_path(info, filename)
        if path.as_posix() in named:
            raise _unsafe(f"member {info.filename!r} appears twice", filename)
        named.add(path.as_posix())
        for each in (path, *path.parents[:-1]):
            if spelled.setdefault(_fold(each), each.as_posix()) != each.as_posix():
                raise _unsafe(
                    f"member {info.filename!r} differs from another only in case", filename
                )
        if info.is_dir():
            dirs.add(path.as_posix())
        else:
            files.add(path.as_posix())
            declared += info.file_size
        dirs.update(parent.as_posix() for parent in path.parents[:-1])
        members.append((info, path))
    if files & dirs:
        raise _unsafe("a member is both a file and a directory", filename)
    if declared > MAX_EXPANDED_BYTES:
        raise _unsafe(f"it expands past {MAX_EXPANDED_BYTES} bytes", filename)
    return members


def _open(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        raise _unsafe("it is not a zip archive", path.name) from None


def _copy(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    used: int,
    filename: str,
    sink: BinaryIO | None,
) -> int:
    """Decompress one member in blocks into ``sink`` (a file, or nowhere), checking
    its CRC; returns the running total, refused past :data:`MAX_EXPANDED_BYTES`."""
    try:
        with archive.open(info) as handle:
            # NOTE: counted as produced, so a member that inflates past what its header
            # declares is refused at the bound, never filling the disk or memory.
            while block := handle.read(CHUNK_BYTES):
                used += len(block)
                if used > MAX_EXPANDED_BYTES:
                    raise _unsafe(f"it expands past {MAX_EXPANDED_BYTES} bytes", filename)
                if sink is not None:
                    sink.write(block)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError):
        raise _unsafe(f"member {info.filename!r} is damaged", filename) from None
    return used


def inspect_archive(path: Path) -> BundleFacts:
    """Check the archive at ``path`` (its name as the release signed it), decompressing
    every member without writing anything."""
    filename = path.name
    with _open(path) as archive:
        members = _members(archive, filename)
        used = 0
        for info, _ in members:
            if not info.is_dir():
                used = _copy(archive, info, used, filename, None)
    top = {p.as_posix() for info, p in members if len(p.parts) == 1 and not info.is_dir()}
    return BundleFacts(
        filename=filename,
        files=sum(1 for info, _ in members if not info.is_dir()),
        expanded_bytes=used,
        shims=tuple(kind for kind in KINDS if SHIMS[kind] in top),
    )


def extract_archive(path: Path, destination: Path) -> None:
    """Extract the (inspected) archive into ``destination``, which must not exist yet."""
    filename = path.name
    destination.mkdir(mode=0o700)
    with _open(path) as archive:
        members = _members(archive, filename)
        used = 0
        for info, member in members:
            target = destination.joinpath(*member.parts)
            # NOTE: every directory here was made by this loop in a fresh destination
            # and no member is a link, so nothing below can lead outside it.
            for parent in reversed(member.parents[:-1]):
                folder = destination.joinpath(*parent.parts)
                if not folder.is_dir():
                    folder.mkdir(mode=0o700)
            if info.is_dir():
                if not target.is_dir():
                    target.mkdir(mode=0o700)
                continue
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as sink:
                used = _copy(archive, info, used, filename, sink)
                sink.flush()
                os.fsync(sink.fileno())


def load_shim(bundle: Path, kind: Kind) -> ModuleType:
    """Import the sealed shim file of ``kind`` (``__owner__.py`` as ``__owner__``) with
    ``bundle`` appended to the import path. Runs in the launched process only."""
    name = SHIMS[kind].removesuffix(".py")
    sys.path.append(str(bundle))
    spec = importlib.util.spec_from_file_location(name, bundle / SHIMS[kind])
    if spec is None or spec.loader is None:
        raise ImportError(f"{SHIMS[kind]} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SHIM_LOADER: Final = (
    "def _load_shim(bundle, name):\n"
    "    import importlib.util, os, sys\n"
    "    sys.path.append(bundle)\n"
    "    spec = importlib.util.spec_from_file_location(name, os.path.join(bundle, name + '.py'))\n"
    "    module = importlib.util.module_from_spec(spec)\n"
    "    sys.modules[name] = module\n"
    "    spec.loader.exec_module(module)\n"
    "    return module\n"
)
""":func:`load_shim` as source, for the ``-c`` launchers (they import nothing of Skulk)."""
