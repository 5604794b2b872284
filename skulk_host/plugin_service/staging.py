"""Staging the manager's runtime: a sealed, independent copy of this Skulk environment.

Shared by the owner's setup (``skulk_cli.plugin_service``) and the host, which stages a
generation of its own build when the manager runs another one
(``skulk_daemon.plugins.manager_refresh``). :func:`stage_service_runtime` makes
``<service root>/runtimes/<generation>/`` (layout and seal:
``skulk_host.plugin_service.runtime``):

1. a virtual environment from the base interpreter (``python -m venv --without-pip``;
   no network, nothing resolved);
2. every installed distribution of the running interpreter, copied from its RECORD in
   one pass (read, hash, write; ``shutil.copystat`` as ``copy2`` does); console
   scripts get the generation's interpreter on their ``#!`` line;
3. the editable Skulk install (a ``.pth`` naming the source tree) materialised as real
   copies of its packages, with a RECORD listing them and no ``direct_url.json``, so
   nothing in the copy points back into the checkout. Any other editable install, a
   link among the copied files or a file outside the environment is refused rather
   than borrowed;
4. ``bootstrap.py``, the generation's own copy of ``plugin_service/bootstrap.py`` (the entry
   the registered service starts through, ``-I -S -B``: it verifies the seal before
   site initialisation or any manager import);
5. ``seal.json`` then ``complete.json`` (see the core module), both temp + rename,
   after the copied bytes are flushed to disk.

The generation is named at random; its ``source_sha256`` (Python, the dependency
inventory, the Skulk build) decides reuse: a rerun with the same source verifies and
reuses the complete generation, a changed source stages a new one, and earlier
generations (complete or interrupted) are kept. :func:`activate_service_runtime`
verifies a generation again and selects it. Staging never touches the live
environment and runs under the runtimes fence.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.plugins.canonical import canonical_sha256
from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_host.files import atomic_write
from skulk_host.plugin_service.bootstrap import BLOCK, python_identity
from skulk_host.plugin_service.runtime import (
    BOOTSTRAP_FILE,
    COMPLETE_FILE,
    SEAL_FILE,
    SKULK_PACKAGES,
    Completion,
    Seal,
    build_identity,
    fence,
    generation_dir,
    measure,
    package_files,
    read_completion,
    runtimes,
    seal_digest,
    select,
    verify,
)

SKULK_DIST: Final = "skulk"
BOOTSTRAP_SOURCE: Final = "skulk_host/plugin_service/bootstrap.py"
VENV_SECONDS: Final = 120.0


def base_interpreter() -> Path:
    base = getattr(sys, "_base_executable", None) or sys.executable
    return Path(base)


def _editable(dist: importlib.metadata.Distribution) -> bool:
    raw = dist.read_text("direct_url.json")
    if not raw:
        return False
    try:
        return bool(json.loads(raw).get("dir_info", {}).get("editable"))
    except (ValueError, AttributeError):
        return False


def _name(dist: importlib.metadata.Distribution) -> str:
    return str(dist.metadata["Name"]).lower().replace("_", "-")


def source_sha256(build: str) -> str:
    """What a staged generation is a copy of: reruns with the same source reuse it."""
    inventory = []
    for dist in importlib.metadata.distributions():
        record = dist.read_text("RECORD") or ""
        inventory.append(
            [_name(dist), str(dist.version), hashlib.sha256(record.encode()).hexdigest()]
        )
    inventory.sort()
    return canonical_sha256(
        {
            "python": python_identity(),
            "interpreter": str(base_interpreter()),
            "build": build,
            "distributions": inventory,
        }
    )


class _Copier:
    """One pass: each file read once, hashed and written; RECORD rows kept for Skulk."""

    def __init__(self, generation: Path, live_prefix: Path) -> None:
        self.generation = generation
        self.live_prefix = live_prefix
        self.known: dict[str, tuple[str, int]] = {}
        self.buffer = bytearray(BLOCK)
        # NOTE: both spellings: run from a staged runtime, the prefix is the
        # ``current`` link while its scripts name the generation itself.
        self.live_bins = tuple(
            {
                (live_prefix / "bin").as_posix() + "/",
                (live_prefix.resolve() / "bin").as_posix() + "/",
            }
        )
        self.python = (generation / "bin" / "python").as_posix()

    def copy(self, source: Path, relative: str) -> tuple[bytes, int]:
        """Copy ``source`` to ``generation/relative``; the raw SHA-256 and the size."""
        destination = self.generation / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        view = memoryview(self.buffer)
        with source.open("rb") as reader, destination.open("wb") as writer:
            first = True
            while count := reader.readinto(self.buffer):
                chunk = bytes(view[:count]) if first else view[:count]
                if first and relative.startswith("bin/"):
                    chunk = self._shebang(bytes(chunk))
                first = False
                digest.update(chunk)
                writer.write(chunk)
                size += len(chunk)
        shutil.copystat(source, destination)
        raw = digest.digest()
        self.known[relative] = (raw.hex(), size)
        return raw, size

    def _shebang(self, head: bytes) -> bytes:
        """A console script's ``#!`` names the generation's interpreter, not the live one."""
        if not head.startswith(b"#!"):
            return head
        line, sep, rest = head.partition(b"\n")
        target = line[2:].strip().decode(errors="replace")
        if target.startswith(self.live_bins):
            return b"#!" + self.python.encode() + sep + rest
        return head


def _within(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def _copy_distributions(copier: _Copier, site: Path) -> tuple[int, int]:
    live_prefix = copier.live_prefix
    site_relative = _within(site, live_prefix)
    if site_relative is None:
        raise refuse("source_invalid", "The running environment's site-packages is not in it.")
    count = 0
    total = 0
    for dist in importlib.metadata.distributions():
        editable = _editable(dist)
        skulk = _name(dist) == SKULK_DIST
        if editable and not skulk:
            raise refuse(
                "source_invalid",
                f"{dist.metadata['Name']} is an editable install: install it normally before "
                "staging the manager's runtime (editable startup hooks are not borrowed).",
            )
        rows: list[str] = []
        dist_info = None
        for entry in dist.files or []:
            source = Path(os.path.normpath(str(dist.locate_file(entry))))
            relative = _within(source, live_prefix)
            if relative is None:
                raise refuse(
                    "source_invalid",
                    f"{dist.metadata['Name']} installs {entry} outside this environment: it is "
                    "refused rather than borrowed.",
                )
            if source.name == "RECORD" and source.parent.name.endswith(".dist-info"):
                dist_info = relative.rsplit("/", 1)[0]
                continue
            if editable and (source.suffix == ".pth" or source.name == "direct_url.json"):
                continue
            if source.is_symlink():
                raise refuse(
                    "source_invalid", f"{entry} of {dist.metadata['Name']} is a link: refused."
                )
            if not source.is_file():
                if "__pycache__" in source.parts:
                    continue
                raise refuse(
                    "source_invalid",
                    f"{dist.metadata['Name']} lists {entry}, which is missing: repair the "
                    "environment before staging.",
                )
            raw, size = copier.copy(source, relative)
            rows.append(_record_row(relative, site_relative, raw, size))
            count += 1
            total += size
        if editable:
            for root in _editable_roots(dist):
                for name in SKULK_PACKAGES:
                    package = root / name
                    if not package.is_dir():
                        continue
                    for inside, path in package_files(package):
                        relative = f"{site_relative}/{inside}"
                        raw, size = copier.copy(path, relative)
                        rows.append(_record_row(relative, site_relative, raw, size))
                        count += 1
                        total += size
        if dist_info is not None:
            record = copier.generation / dist_info / "RECORD"
            if editable:
                rows.append(f"{_record_path(dist_info + '/RECORD', site_relative)},,")
                record.write_text("\n".join(rows) + "\n")
            else:
                copier.copy(live_prefix / dist_info / "RECORD", f"{dist_info}/RECORD")
            count += 1
            total += record.stat().st_size
    return count, total


def _editable_roots(dist: importlib.metadata.Distribution) -> list[Path]:
    roots = []
    for entry in dist.files or []:
        if str(entry).endswith(".pth"):
            for raw in Path(str(dist.locate_file(entry))).read_text().splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("import"):
                    raise refuse(
                        "source_invalid",
                        f"The editable Skulk install runs a startup hook ({entry}): it is "
                        "refused rather than borrowed.",
                    )
                roots.append(Path(line))
    if not roots:
        raise refuse("source_invalid", "The editable Skulk install names no source tree.")
    return roots


def _record_path(relative: str, site_relative: str) -> str:
    if relative.startswith(site_relative + "/"):
        return relative[len(site_relative) + 1 :]
    return os.path.relpath(relative, site_relative)


def _record_row(relative: str, site_relative: str, raw: bytes, size: int) -> str:
    encoded = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return f"{_record_path(relative, site_relative)},sha256={encoded},{size}"


def _reusable(service_root: Path, source: str) -> Completion | None:
    directory = runtimes(service_root)
    if not directory.is_dir():
        return None
    for candidate in sorted(directory.iterdir()):
        if candidate.is_symlink() or not candidate.is_dir():
            continue
        completion = read_completion(candidate)
        if completion is None or completion.source_sha256 != source:
            continue
        try:
            return verify(candidate)
        except PluginRefusal:
            continue
    return None


def stage_service_runtime(service_root: Path) -> tuple[Completion, bool]:
    """A complete, verified generation of this environment; ``True`` when it was staged
    now, ``False`` when a complete copy of the same source was reused."""
    build = build_identity()
    source = source_sha256(build)
    with fence(service_root):
        reused = _reusable(service_root, source)
        if reused is not None:
            return reused, False
        generation = secrets.token_hex(8)
        target = generation_dir(service_root, generation)
        interpreter = base_interpreter()
        done = subprocess.run(
            [str(interpreter), "-I", "-m", "venv", "--without-pip", str(target)],
            capture_output=True,
            text=True,
            timeout=VENV_SECONDS,
            check=False,
        )
        if done.returncode != 0:
            raise refuse("installer_failed", "The base interpreter could not create the runtime.")
        target.chmod(0o700)
        live_prefix = Path(sys.prefix)
        copier = _Copier(target, live_prefix)
        site = Path(sysconfig.get_paths()["purelib"])
        files, total = _copy_distributions(copier, site)
        copied_site = target / site.relative_to(live_prefix)
        copied_build = build_identity(copied_site)
        if copied_build != build:
            raise refuse(
                "source_invalid",
                "The Skulk source changed while it was being copied: run setup again.",
            )
        # NOTE: from the copy just measured into the build, so the entry the service
        # runs is byte for byte the sealed module.
        _, size = copier.copy(copied_site / BOOTSTRAP_SOURCE, BOOTSTRAP_FILE)
        files, total = files + 1, total + size
        measured_files, dirs, links = measure(target, copier.known)
        seal = Seal(
            generation=generation,
            python=python_identity(),
            interpreter=str(interpreter),
            build_sha256=build,
            source_sha256=source,
            files=measured_files,
            dirs=dirs,
            links=links,
        )
        os.sync()  # NOTE: the copied bytes are on disk before anything says complete.
        atomic_write(target / SEAL_FILE, msgspec.json.encode(seal), mode=0o400)
        completion = Completion(
            generation=generation,
            seal_sha256=seal_digest(seal),
            build_sha256=build,
            source_sha256=source,
            files=files,
            bytes=total,
            completed_at=int(time.time()),
        )
        atomic_write(target / COMPLETE_FILE, msgspec.json.encode(completion), mode=0o400)
        return completion, True


def activate_service_runtime(service_root: Path, completion: Completion) -> None:
    """Verify the generation again and select it (the ``current`` link)."""
    with fence(service_root):
        verify(generation_dir(service_root, completion.generation), completion.seal_sha256)
        select(service_root, completion.generation)
