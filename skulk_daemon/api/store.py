"""The public model-store routes: ``/store/...`` on every node.

Thin handlers over :class:`~skulk_daemon.store.service.StoreService`, which reaches
the store host's internal transport wherever it runs; with no store host in the
cluster every route but ``/store/storage`` answers ``503 Store not configured``.
Reads are open; downloads and deletions admit loopback, trusted-fabric peers and the
operator gateway (as ``POST /download/start``).

Model ids contain ``/`` and travel raw, so each method has one ``{rest:path}`` route
under ``/store/models/``: ``<id>/download/status`` (GET), ``<id>/download`` (POST,
DELETE) and ``<id>`` (DELETE) are told apart by their suffix.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Final

import msgspec
from litestar import Controller, delete, get, post

from skulk_core.ids import NodeId
from skulk_core.models.requirements import MAX_MODEL_ID_CHARS
from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.hub.download import COMPLETED
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.node.node import Node
from skulk_daemon.store.host import LOCATION_NODE, LOCATION_STORE, store_root
from skulk_daemon.store.service import StoreService, StoreUnavailable

DOWNLOAD: Final = "/download"
STATUS: Final = "/download/status"
MAX_BODY_FIELD_CHARS: Final = 512


class StoreDownloadBody(msgspec.Struct, frozen=True, kw_only=True):
    gguf_file: str | None = None
    source_revision: str | None = None


def _model_id(value: str, suffix: str = "") -> str:
    model_id = value.removeprefix("/")
    if suffix:
        model_id = model_id.removesuffix(suffix)
    if not 1 <= len(model_id) <= MAX_MODEL_ID_CHARS:
        raise ApiError(
            400, f"model_id must be 1 to {MAX_MODEL_ID_CHARS} characters", code="invalid_model_id"
        )
    return model_id


def _answer(status: int, body: object) -> dict[str, Any]:
    """The store's JSON object on success; its refusal (status and message) as an error."""
    if status >= 400 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise ApiError(
            status if status >= 400 else 502,
            str(message or "the store answered an unexpected body"),
            code="store_error",
        )
    return body


async def _relay(store: StoreService, method: str, path: str, body: object = None) -> object:
    """The store's JSON answer to ``method path``, or its refusal as an ApiError."""
    try:
        status, answer = await store.relay(method, path, body)
    except StoreUnavailable as exc:
        raise _unreachable(exc) from None
    if status >= 400 or not isinstance(answer, (dict, list)):
        _answer(status, answer)
    return answer


def _unreachable(exc: StoreUnavailable) -> ApiError:
    return ApiError(502, f"the store host could not be reached: {exc}", code="store_unreachable")


class StoreController(Controller):
    tags = ("Model store",)
    opt = declare(Requirement.OPEN)

    @get(
        "/store/health",
        summary="Whether the model store is configured and reachable",
        responses=errors(OPENAI, 502, 503),
    )
    async def health(self, store: StoreService, node: Node) -> dict[str, Any]:
        hosts = sorted(node.state.store_hosts)
        try:
            status, body = await store.relay("GET", "/health")
        except StoreUnavailable as exc:
            return {"configured": True, "reachable": False, "store_nodes": hosts, "error": str(exc)}
        return {
            "configured": True,
            "reachable": True,
            "store_nodes": hosts,
            **_answer(status, body),
        }

    @get(
        "/store/registry",
        summary="The models the store holds, and where copies are",
        responses=errors(OPENAI, 502, 503),
    )
    async def registry(self, store: StoreService, node: Node) -> dict[str, Any]:
        body = await _relay(store, "GET", "/registry")
        entries = body.get("entries") if isinstance(body, dict) else None
        listed = entries if isinstance(entries, list) else []
        return {
            "entries": [_enrich(node, e) for e in listed],
            "cache_inventory": _inventory(node),
        }

    @get(
        "/store/downloads",
        summary="Pending, active and failed store downloads",
        responses=errors(OPENAI, 502, 503),
    )
    async def downloads(self, store: StoreService) -> list[dict[str, Any]]:
        body = await _relay(store, "GET", "/downloads")
        return [item for item in body if isinstance(item, dict)] if isinstance(body, list) else []

    @get("/store/storage", summary="This node's model storage, installed artifacts and free disk")
    async def storage(self, node: Node) -> dict[str, Any]:
        return _storage(node)

    @get(
        "/store/models/{rest:path}",
        summary="A store download's status (<model_id>/download/status)",
        responses=errors(OPENAI, 400, 404, 503),
    )
    async def download_status(self, store: StoreService, rest: str) -> dict[str, Any]:
        if not rest.endswith(STATUS):
            raise ApiError(404, f"no store route GET /store/models{rest}", code="not_found")
        model_id = _model_id(rest, STATUS)
        try:
            status, body = await store.relay("GET", store.model_path(model_id, STATUS))
        except StoreUnavailable as exc:
            return {"status": "error", "error": f"the store host could not be reached: {exc}"}
        if status == 404:
            return {"status": "not_found"}
        return _answer(status, body)

    @post(
        "/store/models/{rest:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Ask the store host to fetch a model (<model_id>/download)",
        responses=errors(OPENAI, 400, 404, 409, 502, 503),
    )
    async def start_download(
        self, store: StoreService, rest: str, data: StoreDownloadBody | None = None
    ) -> dict[str, Any]:
        if not rest.endswith(DOWNLOAD):
            raise ApiError(404, f"no store route POST /store/models{rest}", code="not_found")
        model_id = _model_id(rest, DOWNLOAD)
        body = msgspec.to_builtins(data) if data is not None else {}
        path = store.model_path(model_id, DOWNLOAD)
        return _answer(200, await _relay(store, "POST", path, body))

    @delete(
        "/store/models/{rest:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Cancel a store download (<model_id>/download) or delete a stored model",
        responses=errors(OPENAI, 400, 404, 409, 502, 503),
    )
    async def remove(self, store: StoreService, rest: str) -> dict[str, Any]:
        if rest.endswith(DOWNLOAD):
            path = store.model_path(_model_id(rest, DOWNLOAD), DOWNLOAD)
        else:
            path = store.model_path(_model_id(rest))
        return _answer(200, await _relay(store, "DELETE", path))


def _cached_on(node: Node, model_id: str) -> list[dict[str, Any]]:
    """Nodes reporting the model's bytes complete: the store host's own download and
    every node's staged copy report through ``ReportDownloadProgress``."""
    stores = node.state.store_hosts
    found: list[dict[str, Any]] = []
    for node_id, reports in sorted(node.state.downloads.items()):
        for progress in reports:
            if progress.model_id == model_id and progress.status == COMPLETED:
                found.append(
                    {
                        "node_id": node_id,
                        "complete": True,
                        "bytes": progress.total_bytes,
                        "location_kind": LOCATION_STORE if node_id in stores else LOCATION_NODE,
                    }
                )
    return found


def _enrich(node: Node, entry: object) -> object:
    if not isinstance(entry, dict):
        return entry
    model_id = entry.get("model_id")
    return {**entry, "cached_on_nodes": _cached_on(node, str(model_id))}


def _inventory(node: Node) -> dict[str, Any]:
    view = node.view()
    members = list(view.state.topology.nodes)
    observed = [n for n in members if n in view.telemetry]
    coverage = (
        "unavailable"
        if not observed
        else ("current" if len(observed) == len(members) else "syncing")
    )
    return {
        "observed_nodes": len(observed),
        "expected_nodes": len(members),
        "coverage": coverage,
        "store_nodes": sorted(NodeId(n) for n in view.state.store_hosts),
    }


def _storage(node: Node) -> dict[str, Any]:
    """Every installed artifact on this node, its size and use, and the free disk."""
    in_use = {i.shard_assignments.model_id for i in node.state.instances.values()}
    store = store_root(node).resolve() if node.config.model_store.store_host else None
    artifacts: list[dict[str, Any]] = []
    for model in node.installed_models:
        location = Path(model.location)
        manifest = read_manifest(location)
        size = (
            sum(f.size for f in manifest.files)
            if manifest is not None
            else model.card.storage_size.in_bytes
        )
        inside_store = store is not None and location.resolve().is_relative_to(store)
        artifacts.append(
            {
                "model_id": model.card.model_id,
                "path": str(location),
                "size_bytes": size,
                "installed_at": model.installed_at,
                "in_use": model.card.model_id in in_use,
                "locationKind": LOCATION_STORE if inside_store else LOCATION_NODE,
                "manifestComplete": manifest is not None,
                "verificationState": "verified" if manifest is not None else "unresolved",
            }
        )
    node.models_dir.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(node.models_dir)
    return {
        "node_id": node.node_id,
        "artifacts": artifacts,
        "models_dir": str(node.models_dir),
        "free_bytes": usage.free,
        "total_bytes": usage.total,
    }
