"""The manager's staged runtime: its layout, seal, build identity and selection.

Shared by the staging code (``plugin_service/staging.py``: setup and the host's refresh after a
Skulk update stage and select generations), the manager (``skulk_host.plugin_manager``:
it verifies its own generation before serving and selects another on ``reload_runtime``)
and the removal of unused generations (``plugin_service/generations.py``)::

    <service root>/runtimes/
      .fence                        flock held while staging, verifying or selecting
      current -> <generation>       the selection: one symbolic link, replaced atomically
      <generation>/                 a virtual environment (bin/python -> base interpreter)
        seal.json                   the seal: every file's path, SHA-256, size and mode,
                                    every directory's mode, every link's target, the
                                    Skulk build identity and the Python version
        bootstrap.py                the service's entry (``plugin_service/bootstrap.py``):
                                    verifies the seal, then runs the manager
        complete.json               written last (fsynced, temp + rename): the seal's
                                    digest, file and byte counts; without it the
                                    generation is never selected

The **build identity** (``build_sha256``) is the SHA-256 over the domain
``skulk-build-v1``, NUL, and the canonical JSON of ``[[path, sha256], ...]`` of every
file of the Skulk packages (``skulk``, ``skulk_cli``, ``skulk_core``,
``skulk_daemon``, ``skulk_host``), sorted by path, bytecode caches and desktop-browser litter left
out: the same bytes measure to the same identity in the live checkout and in a staged
copy. The **seal digest** is :func:`~skulk_core.plugins.canonical.canonical_sha256` of
the seal document; :func:`verify` re-measures the generation and refuses on any
difference in membership, bytes, permissions or link targets (the interpreter link
included), through the one seal walk in ``plugin_service/bootstrap.py``, which is also what the
registered service starts through (``<generation>/bootstrap.py``, standard library only,
checked before site initialisation). Nothing here re-seals a changed file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Final

import msgspec

from skulk_core.plugins.canonical import canonical_json, canonical_sha256
from skulk_core.plugins.errors import BUILD_DIFFERS, PluginRefusal, RefusalCode, refuse
from skulk_host.files import atomic_write, file_lock, fsync_dir
from skulk_host.plugin_service import bootstrap as walk
from skulk_host.plugin_service.bootstrap import (
    SEAL_VERSION,
    SealMismatch,
    file_sha256,
    first_difference,
    ignored,
    mismatch,
)

RUNTIMES_DIR: Final = "runtimes"
SEAL_FILE: Final = walk.SEAL_FILE
COMPLETE_FILE: Final = walk.COMPLETE_FILE
BOOTSTRAP_FILE: Final = walk.BOOTSTRAP_FILE
CURRENT_LINK: Final = "current"
FENCE_FILE: Final = ".fence"
SETUP_RECORD: Final = "setup.json"
SKULK_PACKAGES: Final = ("skulk", "skulk_cli", "skulk_core", "skulk_daemon", "skulk_host")
BUILD_DOMAIN: Final = b"skulk-build-v1"
GENERATION_PATTERN: Final = r"^[0-9a-f]{16}$"

Generation = Annotated[str, msgspec.Meta(pattern=GENERATION_PATTERN)]


class Seal(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int = SEAL_VERSION
    generation: str
    python: str
    """The interpreter's version (``3.11.7``) and implementation."""
    interpreter: str
    """The base interpreter the generation's ``bin/python`` points at."""
    build_sha256: str
    source_sha256: str
    """What it was staged from (Python, dependency inventory, Skulk build): a rerun of
    setup with the same source reuses this generation."""
    files: dict[str, tuple[str, int, int]]
    """relative path -> (SHA-256, size, permission bits)."""
    dirs: dict[str, int]
    links: dict[str, str]


class Completion(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    generation: str
    seal_sha256: str
    build_sha256: str
    source_sha256: str
    files: int
    bytes: int
    completed_at: int


RERUN_SETUP: Final = (
    "rerun skulk-plugin-service setup in this Skulk environment so the manager is staged "
    "from this build."
)


class ManagerBuildDiffers(PluginRefusal):
    """A manager whose independent core build is not this host's live Skulk build;
    ``next_step`` says what happens about it (by default: rerun setup)."""

    code: RefusalCode = BUILD_DIFFERS

    def __init__(self, host_build: str, manager_build: str, next_step: str = RERUN_SETUP) -> None:
        self.host_build = host_build
        self.manager_build = manager_build
        super().__init__(
            "build_mismatch",
            f"The local plugin manager runs Skulk build {manager_build}, but this host runs "
            f"build {host_build}: {next_step}",
        )

    def wire(self) -> dict[str, object]:
        return {
            "code": self.code,
            "message": self.message,
            "host_build_sha256": self.host_build,
            "manager_build_sha256": self.manager_build,
        }


# -- measuring ---------------------------------------------------------------------------


def package_files(package: Path) -> Iterator[tuple[str, Path]]:
    """``(path relative to the package's parent, path)`` for each file of one Skulk
    package; bytecode caches are left out and a link is refused (never borrowed)."""
    for current, dirnames, filenames in os.walk(package, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        base = Path(current)
        for name in sorted(dirnames + filenames):
            path = base / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                raise refuse(
                    "source_invalid",
                    f"The Skulk source holds a link ({path.relative_to(package.parent)}): it is "
                    "refused rather than borrowed.",
                )
            if stat.S_ISREG(info.st_mode) and not ignored(name, info.st_mode):
                if name.endswith((".pyc", ".pyo")):
                    continue
                yield path.relative_to(package.parent).as_posix(), path


def build_identity(parent: Path | None = None) -> str:
    """The build identity of the Skulk packages under ``parent`` (by default, the ones
    this process imports)."""
    parent = Path(__file__).resolve().parents[2] if parent is None else parent
    entries: list[list[str]] = []
    for name in SKULK_PACKAGES:
        package = parent / name
        if package.is_dir():
            entries += [[relative, file_sha256(path)] for relative, path in package_files(package)]
    entries.sort()
    return hashlib.sha256(BUILD_DOMAIN + b"\x00" + canonical_json(entries)).hexdigest()


def measure(
    root: Path, known: dict[str, tuple[str, int]] | None = None
) -> tuple[dict[str, tuple[str, int, int]], dict[str, int], dict[str, str]]:
    """Files, directories and links under ``root`` (the two seal files left out), as
    :func:`~skulk_host.plugin_service.bootstrap.measure` walks them."""
    try:
        return walk.measure(root, known)
    except SealMismatch as special:
        raise refuse("seal_mismatch", str(special)) from None


def seal_digest(seal: Seal) -> str:
    return canonical_sha256(msgspec.to_builtins(seal))


# -- files -------------------------------------------------------------------------------


def runtimes(service_root: Path) -> Path:
    return service_root / RUNTIMES_DIR


def generation_dir(service_root: Path, generation: str) -> Path:
    if re.fullmatch(GENERATION_PATTERN, generation) is None:
        raise refuse("malformed", "A runtime generation is 16 lowercase hexadecimal characters.")
    return runtimes(service_root) / generation


@contextlib.contextmanager
def fence(service_root: Path, *, wait: bool = True) -> Iterator[bool]:
    """The runtimes fence (an exclusive flock); yields whether it is held."""
    path = runtimes(service_root) / FENCE_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with file_lock(path, None if wait else 0.0) as held:
        yield held


def read_completion(generation: Path) -> Completion | None:
    path = generation / COMPLETE_FILE
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=Completion)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def read_seal(generation: Path) -> Seal:
    try:
        return msgspec.json.decode((generation / SEAL_FILE).read_bytes(), type=Seal)
    except (OSError, msgspec.ValidationError, msgspec.DecodeError):
        raise refuse(
            "seal_mismatch", f"The runtime {generation.name} has no readable seal."
        ) from None


def read_records(generation: Path, expected: str | None = None) -> tuple[Completion, Seal]:
    """The generation's completion record and seal, once they name it and each other
    (and the seal digest is ``expected``, when given); nothing is measured."""
    name = generation.name
    if not generation.is_dir() or generation.is_symlink():
        raise refuse("not_found", f"No runtime generation {name} is staged.")
    completion = read_completion(generation)
    if completion is None or completion.generation != name:
        raise refuse("not_found", f"The runtime generation {name} is not completely staged.")
    seal = read_seal(generation)
    digest = seal_digest(seal)
    if digest != completion.seal_sha256 or seal.generation != name:
        raise refuse("seal_mismatch", f"The runtime {name} does not match its completion record.")
    if expected is not None and digest != expected:
        raise refuse(
            "seal_mismatch", f"The runtime {name} is sealed as {digest}, not as {expected}."
        )
    return completion, seal


def verify(generation: Path, expected: str | None = None) -> Completion:
    """The generation's completion record, once every file, directory and link measures
    exactly to its seal (and the seal digest is ``expected``, when given)."""
    completion, seal = read_records(generation, expected)
    try:
        path = first_difference(generation, seal.files, seal.dirs, seal.links)
    except SealMismatch as special:
        raise refuse("seal_mismatch", str(special)) from None
    if path is not None:
        raise refuse("seal_mismatch", mismatch(generation.name, path))
    return completion


def current_bootstrap(service_root: Path) -> Path:
    """The bootstrap a registered staged service runs: through the ``current`` link."""
    return runtimes(service_root) / CURRENT_LINK / BOOTSTRAP_FILE


def selected(service_root: Path) -> str | None:
    """The selected generation's name (the ``current`` link), or ``None``."""
    link = runtimes(service_root) / CURRENT_LINK
    try:
        target = os.readlink(link)
    except OSError:
        return None
    return target if re.fullmatch(GENERATION_PATTERN, target) else None


def select(service_root: Path, generation: str) -> None:
    """Point ``current`` at ``generation`` (a complete one): one atomic rename."""
    target = generation_dir(service_root, generation)
    if read_completion(target) is None:
        raise refuse("not_found", f"The runtime generation {generation} is not completely staged.")
    link = runtimes(service_root) / CURRENT_LINK
    temporary = link.with_name(f".{CURRENT_LINK}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    os.symlink(generation, temporary)
    os.replace(temporary, link)
    fsync_dir(link.parent)


class Registration(msgspec.Struct, frozen=True, kw_only=True):
    """What the setup record says the registered service runs (its other fields, owned
    by setup, are not read here)."""

    runtime: str = "live_environment"
    python: str = ""
    service: str = "none"


def read_registration(service_root: Path) -> Registration | None:
    try:
        return msgspec.json.decode((service_root / SETUP_RECORD).read_bytes(), type=Registration)
    except (OSError, msgspec.ValidationError, msgspec.DecodeError):
        return None


def current_python(service_root: Path) -> Path:
    """The interpreter a registered staged service runs: through the ``current`` link."""
    return runtimes(service_root) / CURRENT_LINK / "bin" / "python"


def record_selection(service_root: Path, completion: Completion) -> None:
    """Name ``completion``'s generation in the setup record (``setup.json``), when there
    is one, so ``skulk-plugin-service status`` verifies the copy the service runs on.

    Only the runtime fields change (temp + rename); the rest of the record, owned by
    setup, is kept as it is."""
    path = service_root / SETUP_RECORD
    try:
        record = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return
    if not isinstance(record, dict):
        return
    record.update(
        generation=completion.generation,
        seal_sha256=completion.seal_sha256,
        build_sha256=completion.build_sha256,
        updated_at=int(time.time()),
    )
    atomic_write(path, msgspec.json.encode(record))
