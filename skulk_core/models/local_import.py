"""Importing a GGUF file already on this machine: which paths and ids are acceptable.

Pure checks only; ``skulk_daemon.hub.local_import`` reads, hashes and links the file.
A path is refused before anything is opened when it is relative, walks ``..``, does
not end in ``.gguf``, or (once resolved, symlinks followed) lies inside a directory
the node keeps private (its data and configuration: keys, tokens, the event log).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Final

from skulk_core.ids import ModelId
from skulk_core.models.hub_cards import REPO_ID_PATTERN
from skulk_core.models.requirements import MAX_MODEL_ID_CHARS

LOCAL_OWNER: Final = "local"
MAX_IMPORT_PATH_CHARS: Final = 4096
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")


class ImportRefusedError(ValueError):
    """The file cannot be imported; the message says why and what to do."""


def check_import_path(raw: str) -> PurePosixPath:
    """The path as given, if it is acceptable before resolving it."""
    if not raw or len(raw) > MAX_IMPORT_PATH_CHARS or "\0" in raw:
        raise ImportRefusedError(f"path must be 1 to {MAX_IMPORT_PATH_CHARS} characters")
    path = PurePosixPath(raw)
    if not path.is_absolute():
        raise ImportRefusedError(f"path must be absolute, got {raw!r}")
    if ".." in path.parts:
        raise ImportRefusedError(f"path must not contain '..' segments: {raw!r}")
    if path.suffix.lower() != ".gguf":
        raise ImportRefusedError(f"{raw} is not a .gguf file; only GGUF files can be imported")
    return path


def check_resolved(resolved: PurePosixPath, private_dirs: Sequence[PurePosixPath]) -> None:
    """Refuse a resolved path inside one of the node's private directories."""
    for private in private_dirs:
        if resolved == private or private in resolved.parents:
            raise ImportRefusedError(
                f"{resolved} lies inside Skulk's private directory {private}; "
                "import model files from elsewhere"
            )
    if resolved.suffix.lower() != ".gguf":
        raise ImportRefusedError(f"{resolved} (the link's target) is not a .gguf file")


def default_model_id(path: PurePosixPath) -> ModelId:
    """``local/<file stem>``, with anything but letters, digits, ``._-`` made ``-``."""
    stem = _UNSAFE.sub("-", path.stem).strip("-.") or "model"
    return ModelId(f"{LOCAL_OWNER}/{stem[:96]}")


def check_model_id(model_id: str) -> ModelId:
    """An ``owner/name`` id that is safe as a directory name under the models dir."""
    if not 1 <= len(model_id) <= MAX_MODEL_ID_CHARS or REPO_ID_PATTERN.fullmatch(model_id) is None:
        raise ImportRefusedError(
            "model_id must be owner/name (letters, digits, '.', '_' and '-'), "
            f"at most {MAX_MODEL_ID_CHARS} characters"
        )
    if any(part in (".", "..") for part in model_id.split("/")):
        raise ImportRefusedError("model_id must not contain '.' or '..' segments")
    return ModelId(model_id)
