"""The store's provenance record beside each stored model: ``.skulk/store-record.json``.

Why the store holds these bytes: the verification they were fetched under
(``registry_verified``, ``custom``, ``local_legacy`` or ``unverified``), the signed
card and bundle they were fetched for, and for a companion its role and owning card.
Written atomically after the bytes are verified; a model without one (fetched before
records existed, or imported) is described from its installed card instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec

from skulk_core.models.cards import ArtifactRole, ModelCard
from skulk_core.store.selection import Plan, Verification, verification_of
from skulk_daemon.models.sidecar import SIDECAR_DIR
from skulk_host.fsutil import atomic_write

RECORD_NAME: Final = "store-record.json"
RECORD_VERSION: Final = 1
MAX_RECORD_BYTES: Final = 64 * 1024
RECORD_MODE: Final = 0o644


class StoreRecord(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    model_id: str
    verification: Verification
    registry_card_id: str | None = None
    artifact_bundle_id: str | None = None
    artifact_role: ArtifactRole = ArtifactRole.BASE
    owner_model_id: str | None = None
    owner_registry_card_id: str | None = None


def record_of(plan: Plan, card: ModelCard) -> StoreRecord:
    return StoreRecord(
        version=RECORD_VERSION,
        model_id=plan.model_id,
        verification=plan.verification,
        registry_card_id=card.registry_card_id,
        artifact_bundle_id=None if card.artifact_bundle is None else card.artifact_bundle.bundle_id,
        artifact_role=plan.artifact_role,
        owner_model_id=plan.owner_model_id,
        owner_registry_card_id=plan.owner_registry_card_id,
    )


def record_path(model_dir: Path) -> Path:
    return model_dir / SIDECAR_DIR / RECORD_NAME


def write_record(model_dir: Path, record: StoreRecord) -> None:
    atomic_write(record_path(model_dir), msgspec.json.encode(record), mode=RECORD_MODE)


def read_record(model_dir: Path, card: ModelCard) -> StoreRecord:
    """The record kept for ``model_dir``, or one derived from its installed ``card``."""
    try:
        with record_path(model_dir).open("rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
        if len(data) <= MAX_RECORD_BYTES:
            record = msgspec.json.decode(data, type=StoreRecord)
            if record.version == RECORD_VERSION and record.model_id == card.model_id:
                return record
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        pass
    return StoreRecord(
        version=RECORD_VERSION,
        model_id=card.model_id,
        verification=verification_of(card),
        registry_card_id=card.registry_card_id,
        artifact_bundle_id=None if card.artifact_bundle is None else card.artifact_bundle.bundle_id,
    )
