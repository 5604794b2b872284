"""``GET /store/storage``: this node's storage picture.

Every installed artifact (the canonical store's copies, the node's cache, read-only
search roots) with its size, last use, the live instances that depend on it (its own
model or a companion of one: MTP sidecar, assistant, vision weights, draft), what it
is to the card that owns it, and the signed card ids kept with its bytes; then the
durable event log's size and the models volume's free disk.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from skulk_core.models.cards import ArtifactRole, ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.store.answers import LOCATION_NODE, LOCATION_STORE, NodeStorage, StoredArtifact
from skulk_core.store.reconcile import ManifestEntry, manifest_digest
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.models.sidecar import SIDECAR_DIR
from skulk_daemon.node.node import Node
from skulk_daemon.store.cache import LAST_USE_MARKER
from skulk_daemon.store.host import store_root
from skulk_daemon.store.records import StoreRecord, read_record


def _last_used(location: Path) -> float | None:
    """When a runner last launched from these bytes (the ``.skulk/last-use`` marker);
    null when nothing has launched from them since they were installed."""
    try:
        return float((location / SIDECAR_DIR / LAST_USE_MARKER).read_text().strip())
    except (OSError, ValueError):
        return None


def _companion_of(card: ModelCard, cards: list[ModelCard]) -> tuple[ModelCard, ArtifactRole] | None:
    """The catalog card that declares ``card``'s bytes as one of its companions."""
    for owner in cards:
        for companion in owner.companions:
            if companion.model_id is not None and companion.model_id == card.model_id:
                return owner, companion.role
            if (
                companion.model_id is None
                and companion.source_repository == card.source_repository
                and companion.source_revision == card.source_revision
                and companion.gguf_file == card.gguf_file
            ):
                return owner, companion.role
    return None


def _record(model: InstalledModel, cards: list[ModelCard]) -> StoreRecord:
    """What these bytes are: the store's provenance record when one was written, and
    otherwise the card, placed under the catalog card that declares it a companion."""
    record = read_record(Path(model.location), model.card)
    if record.artifact_role != ArtifactRole.BASE:
        return record
    owned = _companion_of(model.card, cards)
    if owned is None:
        return record
    owner, role = owned
    return StoreRecord(
        version=record.version,
        model_id=record.model_id,
        verification=record.verification,
        registry_card_id=record.registry_card_id,
        artifact_bundle_id=record.artifact_bundle_id,
        artifact_role=role,
        owner_model_id=owner.model_id,
        owner_registry_card_id=owner.registry_card_id,
    )


def storage_report(node: Node) -> NodeStorage:
    """Every installed artifact on this node, its size and use, and the free disk."""
    catalog = node.catalog()
    cards = [entry.card for entry in catalog.entries()]
    live = {i.shard_assignments.model_id for i in node.state.instances.values()}
    store = store_root(node).resolve() if node.config.model_store.store_host else None
    artifacts: list[StoredArtifact] = []
    for model in node.installed_models:
        location = Path(model.location)
        manifest = read_manifest(location)
        size = (
            sum(f.size for f in manifest.files)
            if manifest is not None
            else model.card.storage_size.in_bytes
        )
        inside_store = store is not None and location.resolve().is_relative_to(store)
        digest = (
            None
            if manifest is None
            else manifest_digest(
                ManifestEntry(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files
            )
        )
        record = _record(model, cards)
        owner_live = record.owner_model_id is not None and record.owner_model_id in live
        artifacts.append(
            StoredArtifact(
                model_id=model.card.model_id,
                path=str(location),
                size_bytes=size,
                installed_at=model.installed_at,
                last_used_at=_last_used(location),
                in_use=model.card.model_id in live or owner_live,
                location_kind=LOCATION_STORE if inside_store else LOCATION_NODE,
                manifest_complete=manifest is not None,
                manifest_sha256=digest,
                installed_identity=None if digest is None else f"{model.card.model_id}@{digest}",
                verification_state="verified" if manifest is not None else "unresolved",
                artifact_role=record.artifact_role.value,
                owner_model_id=record.owner_model_id,
                owner_card_id=record.owner_registry_card_id,
                registry_card_id=record.registry_card_id,
            )
        )
    node.models_dir.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(node.models_dir)
    return NodeStorage(
        node_id=node.node_id,
        artifacts=artifacts,
        models_dir=str(node.models_dir),
        free_bytes=usage.free,
        total_bytes=usage.total,
        event_log_bytes=node.event_log.size_bytes(),
    )
