"""The publisher kit's bundle archives: a real zip of the bundle (optionally hostile), a
release document that signs it beside its wheels, and the fixture bundle whose fixed
shims (``__owner__.py``, ``__setup__.py``, ``__manage__.py``) the launcher tests run.

The fixture bundle's owner is written only against ``skulk.extensions``: its provider
(``bundle_capability``) lives in the archive and imports a helper from a signed wheel
(``bundle_lib``), so one call proves both halves of the import path."""

from __future__ import annotations

import hashlib
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.plugins.kit import Publisher, Wheel, build_wheel, release_document


@dataclass(frozen=True)
class Archive:
    path: Path
    sha256: str
    size: int

    def artifact(self) -> dict[str, Any]:
        return {"filename": self.path.name, "sha256": self.sha256, "bytes": self.size}


def _info(name: str, mode: int | None = None) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    if mode is not None:
        info.external_attr = mode << 16
    return info


def build_archive(
    out_dir: Path,
    members: dict[str, bytes],
    *,
    name: str = "bundle.zip",
    symlinks: dict[str, str] | None = None,
    special: dict[str, int] | None = None,
    zeros: dict[str, int] | None = None,
) -> Archive:
    """A real zip of ``members``; ``symlinks`` adds members marked as links (name to
    target), ``special`` members of another file type (name to ``st_mode``), ``zeros``
    members of that many zero bytes (streamed in, so a bomb costs no memory)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(_info(member, stat.S_IFREG | 0o644), data)
        for member, target in (symlinks or {}).items():
            archive.writestr(_info(member, stat.S_IFLNK | 0o777), target.encode())
        for member, mode in (special or {}).items():
            archive.writestr(_info(member, mode), b"")
        for member, size in (zeros or {}).items():
            block = b"\0" * (1024 * 1024)
            with archive.open(_info(member, stat.S_IFREG | 0o644), "w", force_zip64=True) as out:
                for start in range(0, size, len(block)):
                    out.write(block[: min(len(block), size - start)])
    data = path.read_bytes()
    return Archive(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def bundle_release(
    publisher: Publisher, wheels: list[Wheel], archive: Archive, **fields: Any
) -> dict[str, Any]:
    """The ``signed`` object of a release signing ``wheels`` and ``archive``."""
    document = release_document(publisher, wheels, **fields)
    document["runtime"]["archive"] = archive.artifact()
    return document


# -- the fixture bundle --------------------------------------------------------------

LIB = "bundle_lib"
GREETING = b'PREFIX = "bundled: "\n'
CAPABILITY = b'''"""The bundle's own provider, written only against skulk.extensions."""

import os

from skulk.extensions import CapabilityDescriptor

from bundle_lib.greeting import PREFIX

ECHO = CapabilityDescriptor(
    id="bundle.echo",
    version="1.0.0",
    title="Echo from a bundle",
    description='Answers {"text": PREFIX + text, "pid": the owner process}.',
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 256}},
        "required": ["text"],
        "additionalProperties": False,
    },
    output_schema={"type": "object"},
)


class BundleEcho:
    def capabilities(self):
        return [ECHO]

    async def handle_call(self, context, call):
        return {"text": PREFIX + call.payload["text"], "pid": os.getpid()}
'''
OWNER_SHIM = b'''"""The fixed owner shim: main is the provider class."""

from bundle_capability import BundleEcho

main = BundleEcho
'''
SETUP_SHIM = b'''"""The fixed local setup shim."""

import json
import sys


def main():
    print("setup " + json.dumps(sys.argv[1:]), flush=True)
    return 3
'''
MANAGE_SHIM = b'''"""The fixed terminal management shim."""

import json
import sys

from bundle_lib.greeting import PREFIX


def main():
    line = sys.stdin.readline().strip()
    print(json.dumps({"argv": sys.argv[1:], "line": PREFIX + line}), flush=True)
    return 0
'''
SELF_CONTAINED_OWNER = b'''"""A self-contained owner shim: a plain program (main returns None)."""

import json
import sys

import helper


def main():
    print(json.dumps({"owner": "bundle", "helper": helper.NAME, "argv": sys.argv[1:]}))
'''


def library_wheel(out_dir: Path, *, owner: bool = False) -> Wheel:
    """``bundle_lib`` (the helper the bundle imports); ``owner`` also declares the
    wheel's tiny owner entry, which makes a second owner source."""
    return build_wheel(
        out_dir, dist=LIB, owner=owner, extra_members={f"{LIB}/greeting.py": GREETING}
    )


def fixture_bundle(out_dir: Path, **shims: bytes) -> Archive:
    """The fixture bundle: the provider package and the three shims (each can be
    replaced, or dropped with ``b""``)."""
    members = {
        "bundle_capability/__init__.py": CAPABILITY,
        "__owner__.py": OWNER_SHIM,
        "__setup__.py": SETUP_SHIM,
        "__manage__.py": MANAGE_SHIM,
    }
    for kind, source in shims.items():
        members.pop(f"__{kind}__.py")
        if source:
            members[f"__{kind}__.py"] = source
    return build_archive(out_dir, members)
