"""The model store's answers as wire types: what the store host's transport answers
and what the public ``/store/*`` routes relay or build from it.

Keys are as they have always been on the wire: the store's own records in
snake_case, the download answers and a few later fields in camelCase. A key that is
absent in some answers (an error, a cancel flag) is ``UNSET``, never ``null``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import msgspec

from skulk_core.models.advisories import Advisory
from skulk_core.models.cards import ArtifactRole, ModelCard

Unset = msgspec.UnsetType
UNSET: Final = msgspec.UNSET

LOCATION_STORE: Final = "store_local"
"""The store host's canonical copy."""
LOCATION_NODE: Final = "node_cache"
"""A node's cached (staged or downloaded) copy."""


class InstalledCard(msgspec.Struct, frozen=True, kw_only=True):
    """The card record kept beside a stored generation's bytes."""

    card: ModelCard
    captured_at: datetime
    """When the card was recorded with the bytes (an ISO 8601 UTC string on the wire)."""


class StoreEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One complete model the store holds."""

    model_id: str
    source_repository: str | None
    source_revision: str | None
    gguf_file: str | None
    total_bytes: int
    file_count: int
    installed_at: int
    location_kind: str = LOCATION_STORE
    verification_state: str = "verified"
    """Every file was verified (size and SHA-256) before its manifest was written."""
    manifest_complete: bool = True
    installed_verification: str = "local_legacy"
    """What vouches for the card the bytes were fetched under: ``registry_verified``,
    ``custom``, ``local_legacy`` or ``unverified`` (fetched by name, no card)."""
    registry_card_id: str | None = None
    artifact_bundle_id: str | None = None
    artifact_role: str = ArtifactRole.BASE.value
    owner_model_id: str | None = None
    owner_registry_card_id: str | None = None
    last_verified_at: int = 0
    """When every file's size and SHA-256 were last verified (the manifest's writing)."""
    manifest_sha256: str | None = None
    """The digest of the canonical manifest: ``model_id@manifest_sha256`` is the
    installed identity."""
    installed_card: InstalledCard | None = None
    """The full card record the bytes were installed under."""


class StoreDownload(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    model_id: str
    source_revision: str | None
    status: str
    """``pending``, ``in_progress``, ``complete``, ``failed``, ``cancelled`` or, for a
    store-host rejection, ``error`` (with ``error``)."""
    progress: float
    """Fraction of the bytes transferred, 0 to 1."""
    downloaded_bytes: int = 0
    total_bytes: int = 0
    error: str | None = None


class CancelledDownload(StoreDownload, frozen=True, kw_only=True, rename="camel"):
    """``DELETE /store/models/<id>/download``: the download as it stopped."""

    cancelled: bool


class ModelDeleted(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``DELETE /store/models/<id>``: the store's copy is gone."""

    model_id: str
    deleted: bool


class DownloadState(msgspec.Struct, frozen=True, kw_only=True):
    """A download status without a download: ``not_found``, or ``error`` when the
    store host could not be reached."""

    status: str
    error: str | Unset = UNSET


class StoreDisk(msgspec.Struct, frozen=True, kw_only=True):
    """The store host's volume (``GET /health`` on its transport)."""

    store_path: str
    free_bytes: int
    total_bytes: int
    used_bytes: int
    checked_at: int


class StoreHealth(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /store/health``: the disk facts when the store answered, its error when
    it could not be reached."""

    configured: bool
    reachable: bool
    store_nodes: list[str]
    error: str | Unset = UNSET
    store_path: str | Unset = UNSET
    free_bytes: int | Unset = UNSET
    total_bytes: int | Unset = UNSET
    used_bytes: int | Unset = UNSET
    checked_at: int | Unset = UNSET


class StoreListing(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /registry`` on the store host's transport."""

    entries: list[StoreEntry]


class CopyLocation(msgspec.Struct, frozen=True, kw_only=True):
    """Where a model's bytes are: the store host's canonical copy or a node's cache.
    ``last_used_at`` is known for the answering node's own staged copy only."""

    node_id: str
    identity: str | None
    complete: bool
    bytes: int | None
    last_used_at: float | None
    in_use: bool
    location_kind: str


class RegistryEntry(StoreEntry, frozen=True, kw_only=True):
    current_registry_identity: str | None = None
    """The signed card the registry publishes for the alias now, when one exists."""
    installed_not_current: bool = True
    """No current signed card, or the installed generation is not under it."""
    update_available: bool = False
    """A current signed card exists and the installed generation is not under it:
    apply it with a store download naming it as ``registry_card_id``."""
    advisories: list[Advisory] = msgspec.field(default_factory=list)
    """Active signed advisories naming the installed or the current card."""
    cached_on_nodes: list[CopyLocation]
    reconciliation_state: str
    """``verified`` (every file verified before the manifest) or ``unresolved``."""


class CacheInventory(msgspec.Struct, frozen=True, kw_only=True):
    observed_nodes: int
    expected_nodes: int
    coverage: str
    """``current``, ``syncing``, ``degraded`` or ``unavailable``
    (:class:`skulk_core.store.currency.Coverage`)."""
    store_nodes: list[str]


class StoreRegistry(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /store/registry``: the models the store holds and where copies are."""

    entries: list[RegistryEntry]
    cache_inventory: CacheInventory


class StoredArtifact(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    path: str
    size_bytes: int
    installed_at: int
    in_use: bool
    location_kind: str = msgspec.field(name="locationKind")
    manifest_complete: bool = msgspec.field(name="manifestComplete")
    manifest_sha256: str | None = msgspec.field(name="manifestSha256")
    installed_identity: str | None = msgspec.field(name="installedIdentity")
    verification_state: str = msgspec.field(name="verificationState")
    last_used_at: float | None = msgspec.field(default=None, name="lastUsedAt")
    """Unix time a runner last launched from these bytes; null when none has since
    they were installed."""
    artifact_role: str = msgspec.field(default=ArtifactRole.BASE.value, name="artifactRole")
    owner_model_id: str | None = msgspec.field(default=None, name="ownerModelId")
    """For a companion, the model whose card declares it."""
    owner_card_id: str | None = msgspec.field(default=None, name="ownerCardId")
    """For a companion, the owning card's immutable signed id."""
    registry_card_id: str | None = msgspec.field(default=None, name="registryCardId")
    """The signed card retained with the bytes; null for a custom or legacy card."""


class NodeStorage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /store/storage``: this node's installed artifacts and free disk."""

    node_id: str
    artifacts: list[StoredArtifact]
    models_dir: str
    free_bytes: int
    total_bytes: int
    event_log_bytes: int = 0
    """The durable event log's size on disk."""


class PurgeOrdered(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    command_id: str
    message: str


class ReconcileFailure(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    node_id: str
    error: str
    at: int


class DiscoveredIdentity(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    node_id: str
    installed_identity: str
    size_bytes: int


class ReconciliationStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What the store's reconciliation scanned, imported and refused."""

    state: str
    inventory_only: bool
    automatic: bool
    disabled_reason: str | None
    eligibility_checks: int
    scanned_nodes: int
    discovered: int
    imported: int
    pending: list[str]
    discovered_identities: list[DiscoveredIdentity]
    tombstoned: list[str]
    failures: list[ReconcileFailure]
    last_verified_at: int | None
