"""Where this node sees copies of models: for each model the store holds, the store
host's canonical copy and every node's complete cached copy (``GET /store/registry``).

Read from State, telemetry and this node's model directory; nothing here asks the
store host (the route relays its listing and this module enriches it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec

from skulk_core.ids import NodeId
from skulk_core.store.answers import (
    LOCATION_NODE,
    LOCATION_STORE,
    CacheInventory,
    CopyLocation,
    RegistryEntry,
    StoreEntry,
)
from skulk_core.store.currency import coverage, currency
from skulk_core.store.reconcile import ManifestEntry, manifest_digest
from skulk_daemon.hub.download import COMPLETED
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.node.node import Node
from skulk_daemon.store.cache import is_staged, last_used


def _cached_on(node: Node, entry: StoreEntry) -> list[CopyLocation]:
    """Where the model's bytes are: the store host's canonical copy (``store_local``,
    with its exact installed identity) and every node reporting a complete copy through
    ``ReportDownloadProgress`` (``node_cache``). ``in_use`` is a placed instance on that
    node; ``last_used_at`` is known for this node's own staged copy (its last-use
    marker) and null elsewhere."""
    model_id = entry.model_id
    stores = node.state.store_hosts
    busy = {
        (node_id, i.shard_assignments.model_id)
        for i in node.state.instances.values()
        for node_id in i.shard_assignments.node_to_runner
    }
    found: dict[str, CopyLocation] = {}
    digest = entry.manifest_sha256
    for store_node in sorted(stores):
        found[store_node] = CopyLocation(
            node_id=store_node,
            identity=None if digest is None else f"{model_id}@{digest}",
            complete=True,
            bytes=entry.total_bytes,
            last_used_at=None,
            in_use=(store_node, model_id) in busy,
            location_kind=LOCATION_STORE,
        )
    own = _own_copy(node, model_id)
    for node_id, reports in sorted(node.state.downloads.items()):
        for progress in reports:
            if progress.model_id != model_id or progress.status != COMPLETED:
                continue
            if node_id in found:
                continue
            mine = own if node_id == node.node_id else None
            found[node_id] = CopyLocation(
                node_id=node_id,
                identity=None if mine is None else mine[0],
                complete=True,
                bytes=progress.total_bytes,
                last_used_at=None if mine is None else mine[1],
                in_use=(node_id, model_id) in busy,
                location_kind=LOCATION_NODE,
            )
    return list(found.values())


def _own_copy(node: Node, model_id: str) -> tuple[str | None, float | None] | None:
    """This node's node-cache copy of ``model_id``: (installed identity, last use)."""
    root = node.models_dir.resolve()
    for model in node.installed_models:
        location = Path(model.location)
        if model.card.model_id != model_id or location.resolve().parent != root:
            continue
        manifest = read_manifest(location)
        if manifest is None:
            return None
        digest = manifest_digest(
            ManifestEntry(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files
        )
        used = last_used(location, float(model.installed_at)) if is_staged(location) else None
        return f"{model_id}@{digest}", used
    return None


def enrich(node: Node, entry: StoreEntry) -> RegistryEntry:
    # The store lists only generations whose every file was verified before its
    # manifest was written; anything else is unresolved and never imported or served.
    whole = entry.manifest_complete and entry.verification_state == "verified"
    signed = node.registry_catalog()
    listed = node.catalog().get(entry.model_id)
    standing = currency(
        entry.registry_card_id,
        None if listed is None else listed.registry_card,
        () if signed is None else signed.advisories,
    )
    return RegistryEntry(
        **msgspec.structs.asdict(entry),
        **msgspec.structs.asdict(standing),
        cached_on_nodes=_cached_on(node, entry),
        reconciliation_state="verified" if whole else "unresolved",
    )


def inventory(node: Node) -> CacheInventory:
    view = node.view()
    members = list(view.state.topology.nodes)
    readings = {n: r.observed_at for n, r in view.telemetry.items() if n in members}
    return CacheInventory(
        observed_nodes=len(readings),
        expected_nodes=len(members),
        coverage=coverage(members, readings, view.state.last_seen, datetime.now(UTC)).value,
        store_nodes=sorted(NodeId(n) for n in view.state.store_hosts),
    )
