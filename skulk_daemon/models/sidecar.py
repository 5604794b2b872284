"""The installed-card sidecar: ``<model dir>/.skulk/installed-card.json``.

A card record kept beside the bytes it describes, so a node (air-gapped or not)
knows exactly which generation it can launch. Written atomically, read strictly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelCard
from skulk_host.fsutil import atomic_write

SIDECAR_DIR: Final = ".skulk"
SIDECAR_NAME: Final = "installed-card.json"
SIDECAR_VERSION: Final = 1
# A card with a long chat template is tens of KiB; anything near this is not a card.
MAX_SIDECAR_BYTES: Final = 4 * 1024 * 1024
SIDECAR_FILE_MODE: Final = 0o644


class SidecarError(ValueError):
    """A sidecar that cannot be used; the message says why."""


class InstalledCardRecord(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    version: int
    card: ModelCard
    installed_at: int


_DECODER: Final = msgspec.json.Decoder(InstalledCardRecord)
_ENCODER: Final = msgspec.json.Encoder()


def sidecar_path(model_dir: Path) -> Path:
    return model_dir / SIDECAR_DIR / SIDECAR_NAME


def model_dir_name(model_id: ModelId) -> str:
    """The directory a model's bytes live in: ``org/name`` becomes ``org--name``."""
    return model_id.replace("/", "--")


def read_sidecar(path: Path) -> InstalledCardRecord:
    """Decode one sidecar, refusing oversized, malformed or unknown-version records."""
    with path.open("rb") as handle:
        data = handle.read(MAX_SIDECAR_BYTES + 1)
    if len(data) > MAX_SIDECAR_BYTES:
        raise SidecarError(f"larger than {MAX_SIDECAR_BYTES} bytes")
    try:
        record = _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise SidecarError(str(exc)) from None
    if record.version != SIDECAR_VERSION:
        raise SidecarError(f"unsupported sidecar version {record.version}")
    return record


def write_sidecar(model_dir: Path, card: ModelCard, installed_at: int) -> None:
    """Record ``card`` beside the bytes in ``model_dir`` (temp file, fsync, rename)."""
    record = InstalledCardRecord(version=SIDECAR_VERSION, card=card, installed_at=installed_at)
    atomic_write(sidecar_path(model_dir), _ENCODER.encode(record), mode=SIDECAR_FILE_MODE)
