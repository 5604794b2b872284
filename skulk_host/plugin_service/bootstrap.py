"""The manager runtime's seal walk, and the bootstrap its registered service starts through.

Standard library only, and it imports nothing of Skulk: staging copies this file into
every generation as ``<generation>/bootstrap.py`` (sealed like any other file), and the
fixed service command runs that copy before anything of the generation can be imported::

    <root>/runtimes/current/bin/python -I -S -B <root>/runtimes/current/bootstrap.py \\
        serve --root <root>/manager --sealed-runtime

With ``-S`` there is no site initialisation: ``sys.path`` holds only the base
interpreter's standard library, no ``.pth`` file or ``sitecustomize`` of the generation
runs. :func:`main` resolves the generation once (``current`` may move meanwhile), then
refuses, with one line on stderr and exit status 2, unless the running interpreter is
that generation's own (its prefix, and the base interpreter and Python version the seal
names), ``complete.json`` names it, and every file, directory and link measures to
``seal.json``: membership, modes, sizes and link targets first, then each file's
SHA-256. Only then does it do what site initialisation does for a virtual environment
(the prefix and the generation's site-packages, their sealed ``.pth`` files included),
note the generation it verified (:func:`verified`, so the manager does not walk the seal
a second time) and run the manager's own package (``skulk_host.plugin_manager``, what the
spec's ``skulk.extensions.runtime_manager`` runs) as ``__main__``: the public alias's
package re-exports the node's extension modules, whose import, compiled from source
under ``-B``, cost a start about 0.45 CPU-s of its 0.8 here.

:func:`measure` and :func:`first_difference` are the one seal walk: setup, ``status``,
``reload_runtime`` and the host's refresh verify through them too
(``plugin_service.runtime.verify``).

Trust root: the service root is owner-only (0700) and only staging writes a generation.
Whoever can write there already runs code as the service's account and could replace
this file as well, so the check is no defence against that account: it refuses a
corrupted or edited copy, desktop-browser leftovers that are not plain files, a changed
interpreter, and this file changed among the rest (``verify`` from outside, in setup and
``status``, covers it as a sealed member). The command carries no digest on purpose: it
stays the same for every generation, so a refresh selects a new generation without
rewriting the root-owned service definition.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import runpy
import site
import stat
import sys
from pathlib import Path
from typing import Any, Final

SEAL_FILE: Final = "seal.json"
COMPLETE_FILE: Final = "complete.json"
BOOTSTRAP_FILE: Final = "bootstrap.py"
SEAL_VERSION: Final = 1
BLOCK: Final = 1024 * 1024
EXIT_REFUSED: Final = 2
ENTRY: Final = "skulk_host.plugin_manager"
"""What the bootstrap runs once the seal is verified (its ``__main__``)."""
MODULE: Final = "skulk_host.plugin_service.bootstrap"

Files = dict[str, tuple[str, int, int]]
"""relative path -> (SHA-256, size, permission bits); the SHA-256 is empty when the
walk measured only the shape."""

_VERIFIED: list[Path] = []
"""The generation this process's bootstrap verified (at most one)."""


class SealMismatch(Exception):
    """The runtime differs from its seal; the message is a sentence for the owner."""


def ignored(name: str, mode: int) -> bool:
    """The regular files a desktop browser leaves behind (never part of a seal)."""
    return stat.S_ISREG(mode) and (name == ".DS_Store" or name.startswith("._"))


def file_sha256(path: Path) -> str:
    """The SHA-256 of a regular file, refusing to follow a link in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def python_identity() -> str:
    """The running interpreter's implementation and version (``cpython-3.11.7``)."""
    return f"{sys.implementation.name}-{'.'.join(map(str, sys.version_info[:3]))}"


def measure(
    root: Path, known: dict[str, tuple[str, int]] | None = None, *, digests: bool = True
) -> tuple[Files, dict[str, int], dict[str, str]]:
    """Files, directories and links under ``root`` (the two seal files left out).

    ``known`` maps a path to the SHA-256 and size measured while it was copied: a file
    of that size is not read again. Without ``digests`` no file is read at all."""
    known = known or {}
    files: Files = {}
    dirs: dict[str, int] = {}
    links: dict[str, str] = {}
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(current)
        for name in sorted(dirnames + filenames):
            path = base / name
            relative = path.relative_to(root).as_posix()
            if relative in (SEAL_FILE, COMPLETE_FILE):
                continue
            info = path.lstat()
            if ignored(name, info.st_mode):
                continue
            if stat.S_ISLNK(info.st_mode):
                links[relative] = os.readlink(path)
            elif stat.S_ISDIR(info.st_mode):
                dirs[relative] = stat.S_IMODE(info.st_mode)
            elif stat.S_ISREG(info.st_mode):
                copied = known.get(relative)
                if not digests:
                    sha = ""
                elif copied and copied[1] == info.st_size:
                    sha = copied[0]
                else:
                    sha = file_sha256(path)
                files[relative] = (sha, info.st_size, stat.S_IMODE(info.st_mode))
            else:
                raise SealMismatch(f"The staged runtime holds a special file: {relative}.")
    return files, dirs, links


def first_difference(
    root: Path, files: Files, dirs: dict[str, int], links: dict[str, str]
) -> str | None:
    """The first path under ``root`` that differs from the sealed ``files``, ``dirs``
    and ``links`` (``None``: none does). Membership, sizes, modes and links are compared
    before any file is read, so most differences are found without hashing."""
    found, found_dirs, found_links = measure(root, digests=False)
    shapes = (
        (_shape(files), _shape(found)),
        (dirs, found_dirs),
        (links, found_links),
    )
    for sealed, measured in shapes:
        for path in sorted(set(sealed) | set(measured)):
            if sealed.get(path) != measured.get(path):
                return path
    for path in sorted(files):
        try:
            if file_sha256(root / path) != files[path][0]:
                return path
        except OSError:
            return path
    return None


def _shape(files: Files) -> dict[str, tuple[int, int]]:
    return {path: (size, mode) for path, (_, size, mode) in files.items()}


def mismatch(name: str, path: str) -> str:
    return (
        f"The runtime {name} no longer matches its seal ({path} differs): it will not run; "
        "rerun skulk-plugin-service setup to stage a fresh copy."
    )


def verified() -> Path | None:
    """The generation this process's bootstrap verified before anything was imported
    (``None``: the process did not start through the bootstrap)."""
    return _VERIFIED[0] if _VERIFIED else None


# -- the bootstrap -----------------------------------------------------------------------


def _document(path: Path) -> dict[str, Any] | None:
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _sealed_files(seal: dict[str, Any]) -> Files:
    return {
        path: (str(sha), int(size), int(mode)) for path, (sha, size, mode) in seal["files"].items()
    }


def check(generation: Path) -> None:
    """Refuse (:class:`SealMismatch`) unless this interpreter is ``generation``'s own and
    the generation measures exactly to its seal."""
    name = generation.name
    interpreter = os.path.abspath(sys.executable)
    if Path(interpreter).parent.parent.resolve() != generation:
        raise SealMismatch(
            f"{interpreter} is not the interpreter of the runtime {name}: start the service "
            "with that runtime's bin/python."
        )
    completion = _document(generation / COMPLETE_FILE)
    if completion is None or completion.get("generation") != name:
        raise SealMismatch(f"The runtime generation {name} is not completely staged.")
    seal = _document(generation / SEAL_FILE)
    try:
        if seal is None or seal["version"] != SEAL_VERSION or seal["generation"] != name:
            raise ValueError(name)
        files = _sealed_files(seal)
        dirs = {str(p): int(mode) for p, mode in seal["dirs"].items()}
        links = {str(p): str(target) for p, target in seal["links"].items()}
        python, base = str(seal["python"]), str(seal["interpreter"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise SealMismatch(f"The runtime {name} has no readable seal.") from None
    if python != python_identity() or os.path.realpath(interpreter) != os.path.realpath(base):
        raise SealMismatch(
            f"The runtime {name} is sealed to {python} at {base}, but {interpreter} is "
            f"{python_identity()} at {os.path.realpath(interpreter)}: rerun "
            "skulk-plugin-service setup to stage a runtime for this interpreter."
        )
    path = first_difference(generation, files, dirs, links)
    if path is not None:
        raise SealMismatch(mismatch(name, path))


def _enter(generation: Path) -> None:
    """What site initialisation does for a virtual environment, on the verified copy."""
    prefix = str(generation)
    sys.prefix = sys.exec_prefix = prefix
    site.PREFIXES = [prefix]
    for directory in site.getsitepackages([prefix]):
        if os.path.isdir(directory):
            site.addsitedir(directory)
    # NOTE: the sealed copy of this module, verified a moment ago: the manager reads
    # there that its seal was walked before any of it was imported.
    shared = importlib.import_module(MODULE)
    shared._VERIFIED.append(generation)
    runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)


def main() -> int:
    generation = Path(__file__).resolve().parent
    try:
        check(generation)
    except (SealMismatch, OSError) as refused:
        text = str(refused) if isinstance(refused, SealMismatch) else _os_error(refused)
        print(f"The plugin manager refuses to start: {text}", file=sys.stderr)
        return EXIT_REFUSED
    _enter(generation)
    return 0


def _os_error(error: OSError) -> str:
    return f"The staged runtime could not be read ({error.strerror})."


if __name__ == "__main__":
    sys.exit(main())
