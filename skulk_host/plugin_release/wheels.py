"""Checking a wheel before anything installs it: read as data, never imported or run.

A wheel is refused unless every member is a plain relative path inside the archive
(no absolute path, no ``..``, no backslash or drive, no symlink, no duplicate), its
file name parses and one of its tags fits this interpreter, its ``.dist-info`` names the
same distribution and version as its file name, and its ``RECORD`` lists exactly its
members with their SHA-256 and size. ``entry_points.txt`` is read as text to find what
the wheel declares under ``skulk.capability_runtime`` (``owner``, ``manage``,
``setup``); :func:`declared_entries` reads the same declarations from the installed,
sealed ``site-packages``.
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import io
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from packaging.tags import Tag, sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from skulk_core.plugins.errors import PluginRefusal, refuse

RUNTIME_GROUP: Final = "skulk.capability_runtime"
MAX_MEMBERS: Final = 10_000
MAX_METADATA_MEMBER_BYTES: Final = 1024 * 1024
"""``METADATA``, ``RECORD`` and ``entry_points.txt`` are read into memory: bounded."""


@dataclass(frozen=True, slots=True)
class WheelFacts:
    filename: str
    distribution: str
    version: str
    runtime_entries: dict[str, str]
    """``skulk.capability_runtime`` entries: name to ``module:function``."""


def _unsafe(reason: str, filename: str) -> PluginRefusal:
    return refuse("unsafe_archive", f"{filename} is refused: {reason}.")


def _check_member(info: zipfile.ZipInfo, filename: str) -> None:
    name = info.filename
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise _unsafe(f"member {name!r} is a symbolic link", filename)
    if "\\" in name or "\0" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _unsafe(f"member {name!r} is not a relative archive path", filename)
    parts = PurePosixPath(name).parts
    if not parts or any(part in ("..", ".") for part in parts):
        raise _unsafe(f"member {name!r} escapes the archive", filename)


def _compatible(tags: frozenset[Tag]) -> bool:
    return any(tag in tags for tag in sys_tags())


def inspect_wheel(path: Path) -> WheelFacts:
    """Check the wheel at ``path`` (its name as the release signed it)."""
    filename = path.name
    try:
        name, version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        raise _unsafe("its file name is not a wheel name", filename) from None
    if not _compatible(tags):
        raise refuse("platform_mismatch", f"{filename} has no tag this interpreter supports.")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        raise _unsafe("it is not a zip archive", filename) from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise _unsafe(f"it has more than {MAX_MEMBERS} members", filename)
        seen: set[str] = set()
        for info in infos:
            _check_member(info, filename)
            if info.filename in seen:
                raise _unsafe(f"member {info.filename!r} appears twice", filename)
            seen.add(info.filename)
        info_dirs = {n.split("/")[0] for n in seen if n.split("/")[0].endswith(".dist-info")}
        if len(info_dirs) != 1:
            raise _unsafe("it does not have exactly one .dist-info directory", filename)
        (info_dir,) = info_dirs
        metadata = _read(archive, f"{info_dir}/METADATA", filename)
        _check_identity(metadata, name, str(version), filename)
        _check_record(archive, info_dir, seen, filename)
        entries = _runtime_entries(archive, f"{info_dir}/entry_points.txt", seen, filename)
    return WheelFacts(
        filename=filename, distribution=str(name), version=str(version), runtime_entries=entries
    )


def _read(archive: zipfile.ZipFile, member: str, filename: str) -> str:
    try:
        info = archive.getinfo(member)
    except KeyError:
        raise _unsafe(f"it has no {member}", filename) from None
    if info.file_size > MAX_METADATA_MEMBER_BYTES:
        raise _unsafe(f"{member} is too large", filename)
    try:
        return archive.read(member).decode("utf-8")
    except (UnicodeDecodeError, zipfile.BadZipFile):
        raise _unsafe(f"{member} cannot be read", filename) from None


def _check_identity(metadata: str, name: str, version: str, filename: str) -> None:
    fields: dict[str, str] = {}
    for line in metadata.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    if canonicalize_name(fields.get("name", "")) != canonicalize_name(name):
        raise _unsafe("its METADATA names another distribution", filename)
    if fields.get("version") != version:
        raise _unsafe("its METADATA names another version", filename)


def _check_record(
    archive: zipfile.ZipFile, info_dir: str, members: set[str], filename: str
) -> None:
    record_name = f"{info_dir}/RECORD"
    record = _read(archive, record_name, filename)
    listed: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(record)):
        if not row:
            continue
        if len(row) != 3:
            raise _unsafe("its RECORD is malformed", filename)
        listed[row[0]] = (row[1], row[2])
    files = {m for m in members if not m.endswith("/")}
    signatures = {f"{info_dir}/RECORD.jws", f"{info_dir}/RECORD.p7s"}
    if files - signatures - set(listed) or set(listed) - files:
        raise _unsafe("its RECORD does not list exactly its members", filename)
    for member, (digest, size) in listed.items():
        if member == record_name or member in signatures:
            continue
        if not size.isdigit() or archive.getinfo(member).file_size != int(size):
            raise _unsafe(f"member {member!r} does not match its RECORD entry", filename)
        # NOTE: hashed in blocks and cut off at the declared size: a member that
        # inflates past what RECORD says never fills memory.
        hasher, seen = hashlib.sha256(), 0
        with archive.open(member) as handle:
            while block := handle.read(1024 * 1024):
                seen += len(block)
                if seen > int(size):
                    break
                hasher.update(block)
        expected = "sha256=" + base64.urlsafe_b64encode(hasher.digest()).rstrip(b"=").decode()
        if digest != expected or seen != int(size):
            raise _unsafe(f"member {member!r} does not match its RECORD entry", filename)


def _runtime_entries(
    archive: zipfile.ZipFile, member: str, members: set[str], filename: str
) -> dict[str, str]:
    if member not in members:
        return {}
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(_read(archive, member, filename))
    except configparser.Error:
        raise _unsafe("its entry_points.txt cannot be read", filename) from None
    if not parser.has_section(RUNTIME_GROUP):
        return {}
    return {key: value.strip() for key, value in parser.items(RUNTIME_GROUP)}


def declared_entries(site: Path, kind: str) -> list[str]:
    """Every ``kind`` entry the installed distributions in ``site`` declare, read as data."""
    found: list[str] = []
    for entry_points in sorted(site.glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            parser.read_string(entry_points.read_text())
        except (configparser.Error, UnicodeDecodeError):
            raise refuse("unsafe_archive", "An installed entry point list is unreadable.") from None
        if parser.has_option(RUNTIME_GROUP, kind):
            found.append(parser.get(RUNTIME_GROUP, kind).strip())
    return found
