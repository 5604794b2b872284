"""What the plugin routes answer: the manager's results and the inventory, as Structs.

Each Struct spells one JSON object the manager (``skulk_daemon/plugins/manager``) or the
node-configuration door answers today, field for field and in the same order, so that
decoding an answer and encoding it again changes nothing a client sees, and so that
``/api/openapi.json`` documents every success body. Values the manager computed are
taken as it sent them (no bounds re-checked here: the manager is local and trusted).
A field that only some answers carry is ``UNSET`` when absent, and then omitted again.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from skulk_core.plugins.documents import CatalogListingFields
from skulk_core.plugins.node_configuration import ConfigurableNode


class ManagerError(msgspec.Struct, frozen=True, kw_only=True):
    """The manager's error body (``{"ok": false, "error": ...}``): ``code``, ``message``
    and ``reason`` for a refusal; ``kind``, ``offered`` and ``accepted`` alone for
    ``release_protocol_unsupported``; the two builds for ``manager_build_differs``."""

    code: str | None = None
    message: str | None = None
    reason: str | None = None
    kind: str | None = None
    offered: int | None = None
    accepted: list[int] | None = None
    host_build_sha256: str | None = None
    manager_build_sha256: str | None = None


# -- installations -----------------------------------------------------------------------


class ReleaseDisplay(msgspec.Struct, frozen=True, kw_only=True):
    """The selected release's names, read from its retained record (display only)."""

    bundle_id: str
    title: str | None
    bundle_version: str
    publisher: str
    sequence: int


class PublishedSelection(msgspec.Struct, frozen=True, kw_only=True):
    """The published desired state (``runtime-selection.json``): not process health."""

    revision: int = 0
    runtime_digest: str | None = None
    enabled: bool = False
    uninstalled: bool = False
    operation_id: str | None = None
    highest_sequence: int = 0
    """The highest release sequence ever selected, kept even after a rollback."""


class OwnerProcess(msgspec.Struct, frozen=True, kw_only=True):
    """The owner process as the manager's supervisor observes it (never readiness);
    a manager without a supervisor answers the status ``not_supervised`` alone."""

    status: str
    lifetimes: int | msgspec.UnsetType = msgspec.UNSET
    consecutive_failures: int | msgspec.UnsetType = msgspec.UNSET
    backoff_seconds: int | float | msgspec.UnsetType = msgspec.UNSET
    restart_in_seconds: int | float | msgspec.UnsetType | None = msgspec.UNSET
    error_code: str | msgspec.UnsetType | None = msgspec.UNSET


class OperationSummary(msgspec.Struct, frozen=True, kw_only=True):
    operation_id: str
    state: str


class Installation(msgspec.Struct, frozen=True, kw_only=True):
    """One managed installation: its selection, owner process and live operations."""

    plugin_id: str
    release: ReleaseDisplay | None
    reload_runtime: bool
    selection: PublishedSelection | None
    selected_digest: str | None
    selection_revision: int
    enabled: bool
    uninstalled: bool
    service: OwnerProcess
    stale: bool
    operation_id: str | None
    operation_state: str | None
    error_code: str | None
    operations: list[OperationSummary]


class ManagerListing(msgspec.Struct, frozen=True, kw_only=True):
    """The manager's ``list`` result, as far as a route reads it (the runtime's build and
    generation stay host-local); ``reload_runtime`` is absent from older managers."""

    installations: list[Installation]
    reload_runtime: bool = False


class ManagedInstallations(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/plugins/managed``."""

    installations: list[Installation]
    reload_runtime: bool


class Purged(msgspec.Struct, frozen=True, kw_only=True):
    plugin_id: str
    purged: bool


# -- sources, releases, catalog ----------------------------------------------------------


class SourceStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A release source's (or the catalog's) readiness; never its address or token."""

    revision: int
    configured: bool
    credential_reference: str | None
    credential_ready: bool
    trust_revision: int | None


class ReleaseReview(msgspec.Struct, frozen=True, kw_only=True):
    """What an owner reviews before installing a verified release."""

    runtime_digest: str
    source_revision: int
    publisher: str
    bundle_id: str
    version: str
    sequence: int
    platform: str
    python_requires: str
    skulk_build_sha256: str | None
    permissions: list[str]
    artifact_bytes: int
    expires_at: int


class CatalogListing(CatalogListingFields, frozen=True, kw_only=True):
    """One catalog entry as reviewed: without its address, with whether it fits."""

    matches_host: bool


class CatalogReview(msgspec.Struct, frozen=True, kw_only=True):
    """A verified catalog as reviewed, and the catalog protocols this host accepts."""

    publisher: str
    revision: int
    created_at: int
    expires_at: int
    catalog_sha256: str
    entries: list[CatalogListing]
    window: list[int] | msgspec.UnsetType = msgspec.UNSET


class CatalogInstalled(msgspec.Struct, frozen=True, kw_only=True):
    """An installation bound to a reviewed listing (nothing downloaded or staged)."""

    plugin_id: str
    listing: CatalogListing
    source: SourceStatus
    review: ReleaseReview


# -- the inventory (``GET /v1/plugins``) ---------------------------------------------------

NodeStatus = Literal["enabled", "disabled", "not_installed", "uninstalled"]


class InventoryNode(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One node of an inventory entry. A managed installation whose owner has not
    described itself lists its selected bundle alone, without the facet flags."""

    node_id: str
    bundle_id: str | None
    version: str | None
    status: str
    configurable: bool
    credentials_configurable: bool
    preflight_available: bool | msgspec.UnsetType = msgspec.UNSET
    setup_available: bool | msgspec.UnsetType = msgspec.UNSET
    setup_actions_available: bool | msgspec.UnsetType = msgspec.UNSET
    proposals_available: bool | msgspec.UnsetType = msgspec.UNSET
    proposal_actions_available: bool | msgspec.UnsetType = msgspec.UNSET


class InventoryEntry(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    plugin_id: str
    available: bool
    nodes: list[InventoryNode]


class PluginInventory(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/plugins``: in-process providers first, then managed installations."""

    plugins: list[InventoryEntry]


def selected_node(installation: Installation) -> InventoryNode | None:
    """The inventory node of an installation whose owner has not described itself: its
    selected bundle (``None`` before one is selected)."""
    if installation.selected_digest is None:
        return None
    release = installation.release
    status: NodeStatus
    if installation.uninstalled:
        status = "uninstalled"
    else:
        status = "enabled" if installation.enabled else "disabled"
    return InventoryNode(
        node_id=installation.plugin_id if release is None else release.bundle_id,
        bundle_id=None if release is None else release.bundle_id,
        version=None if release is None else release.bundle_version,
        status=status,
        # NOTE: an owner that has not described itself over its socket (not running,
        # or not speaking the owner protocol) offers nothing.
        configurable=False,
        credentials_configurable=False,
    )


def described_node(node: ConfigurableNode, facets: frozenset[str]) -> InventoryNode:
    """The inventory node of a provider that describes ``node``: a facet flag is true
    only where the node declares it and its provider implements it (``facets``)."""
    return InventoryNode(
        node_id=node.node_id,
        bundle_id=node.bundle_id,
        version=node.version,
        status=node.status,
        configurable=node.configurable,
        credentials_configurable=node.credentials_configurable,
        preflight_available="preflight" in facets,
        setup_available=node.setup_available and "setup" in facets,
        setup_actions_available=node.setup_actions_available and "setup_actions" in facets,
        proposals_available=node.proposals_available and "proposals" in facets,
        proposal_actions_available=(
            node.proposal_actions_available and "proposal_actions" in facets
        ),
    )
