"""Rebuilding the store's installed-card associations (``GET /registry?
recover_installed_cards=true`` on the store transport).

A store directory is associated with the card it was installed under by its
``.skulk/installed-card.json`` sidecar. Recovery first joins every complete directory
whose sidecar the node does not yet hold (written by another process, or restored from
a backup), then gives a complete directory that has no sidecar (fetched before card
records existed) the card of the trusted catalog (signed registry or operator custom
card) that names exactly its bytes: the card's file, or every file of its artifact
bundle with its size, must be in the verified manifest. A directory no trusted card
names stays unassociated and is never served as a model.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import CatalogSource, InstalledModel
from skulk_core.store.selection import verification_of
from skulk_daemon.hub.download import DownloadRefused
from skulk_daemon.hub.manifest import FileManifest, read_manifest
from skulk_daemon.models.sidecar import sidecar_path, write_sidecar
from skulk_daemon.store.host import StoreHostService
from skulk_daemon.store.records import StoreRecord, write_record

log = logging.getLogger(__name__)

TRUSTED_SOURCES = (CatalogSource.REGISTRY, CatalogSource.CUSTOM)


def _names_bytes(card: ModelCard, manifest: FileManifest) -> bool:
    sizes = {f.path: f.size for f in manifest.files}
    bundle = card.artifact_bundle
    if bundle is not None:
        root = bundle.root.strip("/")
        return all(
            sizes.get(f"{root}/{f.path}" if root else f.path) == f.size for f in bundle.files
        )
    return card.gguf_file is not None and card.gguf_file in sizes


def recover_installed_cards(store: StoreHostService) -> list[str]:
    """Rebuild the associations; the ids newly associated from catalog cards."""
    node = store.node
    store.adopt_existing()
    recovered: list[str] = []
    for entry in node.catalog().entries():
        if entry.catalog_source not in TRUSTED_SOURCES or entry.card.qualification_only:
            continue
        card = entry.card
        try:
            location = store.downloads.model_dir(card.model_id)
        except DownloadRefused:
            continue  # an id that names no safe store directory holds nothing here
        if sidecar_path(location).exists():
            continue
        manifest = read_manifest(location)
        if manifest is None or not _names_bytes(card, manifest):
            continue
        installed_at = int(time.time())
        write_record(
            location,
            StoreRecord(
                version=1,
                model_id=card.model_id,
                verification=verification_of(card),
                registry_card_id=card.registry_card_id,
                artifact_bundle_id=(
                    None if card.artifact_bundle is None else card.artifact_bundle.bundle_id
                ),
            ),
        )
        write_sidecar(location, card, installed_at)
        # A record lost under a running node leaves its old entry: replaced, not doubled.
        node.installed_models[:] = [
            m for m in node.installed_models if Path(m.location).resolve() != location
        ]
        node.installed_models.append(
            InstalledModel(card=card, location=str(location), installed_at=installed_at)
        )
        log.info("associated the stored %s with its catalog card", card.model_id)
        recovered.append(card.model_id)
    return recovered
