"""Bring your own model: Hugging Face discovery and add, node downloads, local import.

Thin handlers over :class:`~skulk_daemon.hub.service.HubService`. Authority per the
spec: reads are open; ``POST /models/add`` and the download routes admit loopback,
trusted-fabric peers and the operator gateway; ``POST /models/import`` (beyond the
spec: it reads a path on this machine) only a direct loopback peer or the gateway.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Final

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import Parameter

from skulk_core.models.cards import ModelCard
from skulk_core.models.listing import ModelListItem, model_list_item
from skulk_core.models.requirements import MAX_MODEL_ID_CHARS
from skulk_core.state.state import DownloadProgress
from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.hub.search import SearchResult
from skulk_daemon.hub.service import HubService
from skulk_daemon.node.node import Node

MAX_SEARCH_LIMIT: Final = 100
MAX_SEARCH_OFFSET: Final = 10_000
MAX_QUERY_CHARS: Final = 256


class AddModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    gguf_file: str | None = None
    source_revision: str | None = None


class QuantOption(msgspec.Struct, frozen=True, kw_only=True):
    gguf_file: str
    label: str
    total_bytes: int
    shard_count: int


class GgufQuants(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    options: tuple[QuantOption, ...]


class CardSummary(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    summary: str


class ShardCard(msgspec.Struct, frozen=True, kw_only=True):
    """The part of a shard's metadata the download needs (other fields are ignored)."""

    model_card: ModelCard


class DownloadStartRequest(msgspec.Struct, frozen=True, kw_only=True):
    target_node_id: str
    shard_metadata: ShardCard | None = None
    model_id: str | None = None
    """Shorthand for the catalog's own card (what ``skulk models download`` sends)."""


class DownloadStatus(msgspec.Struct, frozen=True, kw_only=True):
    node_id: str
    model_id: str
    status: str
    downloaded_bytes: int
    total_bytes: int
    error: str | None = None


class ImportRequest(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    model_id: str | None = None


class ImportResult(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    path: str
    gguf_file: str
    sha256: str
    size_bytes: int
    model: ModelListItem


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Accepted for compatibility; current cards need no approval."""

    note: str | None = None


class RemoteCodeApprovals(msgspec.Struct, frozen=True, kw_only=True):
    approvals: tuple[str, ...] = ()
    deprecated: bool = True
    message: str = (
        "Deprecated: approvals no longer take part in model execution; signed publication "
        "and explicit model addition authorize repository code."
    )


def _status(node_id: str, progress: msgspec.Struct) -> DownloadStatus:
    assert isinstance(progress, DownloadProgress)
    return DownloadStatus(
        node_id=node_id,
        model_id=progress.model_id,
        status=progress.status,
        downloaded_bytes=progress.downloaded_bytes,
        total_bytes=progress.total_bytes,
        error=progress.error_message,
    )


_ATTEMPT_ID: Final = re.compile(r"[0-9A-Za-z]{1,64}")


def _relayed(answer: object) -> DownloadStatus:
    try:
        return msgspec.convert(answer, DownloadStatus)
    except msgspec.ValidationError as exc:
        raise ApiError(
            502, f"the target node answered an unexpected body: {exc}", code="node_refused"
        ) from None


def _model_id(value: str) -> str:
    # A ``:path`` parameter keeps its leading slash; model ids contain slashes.
    model_id = value.removeprefix("/")
    if not 1 <= len(model_id) <= MAX_MODEL_ID_CHARS:
        raise ApiError(
            400, f"model_id must be 1 to {MAX_MODEL_ID_CHARS} characters", code="invalid_model_id"
        )
    return model_id


class HubController(Controller):
    tags = ("Models",)
    opt = declare(Requirement.OPEN)

    @get(
        "/models/search",
        summary="Search Hugging Face model repositories",
        responses=errors(OPENAI, 400, 502),
    )
    async def search(
        self,
        hub: HubService,
        *,
        # NOTE: ``query`` is a name Litestar reserves (the whole query string).
        text: Annotated[str, Parameter(query="query", max_length=MAX_QUERY_CHARS)] = "",
        limit: Annotated[int, Parameter(ge=1, le=MAX_SEARCH_LIMIT)] = 20,
        offset: Annotated[int, Parameter(ge=0, le=MAX_SEARCH_OFFSET)] = 0,
        mlx_only: bool = False,
        pipeline_tag: Annotated[str | None, Parameter(max_length=64)] = None,
    ) -> list[SearchResult]:
        return await hub.search(
            query=text,
            limit=limit,
            offset=offset,
            mlx_only=mlx_only,
            pipeline_tag=pipeline_tag or None,
        )

    @get(
        "/models/gguf-quants",
        summary="A GGUF repository's downloadable quantizations",
        responses=errors(OPENAI, 400, 404, 502),
    )
    async def gguf_quants(self, hub: HubService, model_id: str) -> GgufQuants:
        quants = await hub.quants(model_id)
        return GgufQuants(
            model_id=model_id,
            options=tuple(
                QuantOption(
                    gguf_file=q.gguf_file,
                    label=q.label,
                    total_bytes=q.total_bytes,
                    shard_count=q.shard_count,
                )
                for q in quants
            ),
        )

    @get(
        "/models/card-summary",
        summary="The first prose of a repository's model card",
        responses=errors(OPENAI, 400, 404, 502),
    )
    async def card_summary(self, hub: HubService, model_id: str) -> CardSummary:
        return CardSummary(model_id=model_id, summary=await hub.summary(model_id))

    @post(
        "/models/add",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Add a Hugging Face model, pinned to one commit",
        responses=errors(OPENAI, 400, 404, 502, 503, 504),
    )
    async def add(self, hub: HubService, data: AddModelRequest) -> ModelListItem:
        return await hub.add(data.model_id, data.gguf_file, data.source_revision)

    @post(
        "/models/import",
        opt=declare(Requirement.DIRECT_LOOPBACK),
        status_code=200,
        summary="Import a GGUF file on this machine (hard link, hashed)",
        responses=errors(OPENAI, 400, 403, 404, 409),
    )
    async def import_model(self, hub: HubService, data: ImportRequest) -> ImportResult:
        entry = await hub.import_file(data.path, data.model_id)
        assert entry.location is not None and entry.card.gguf_file is not None
        manifest = read_manifest(Path(entry.location))
        recorded = manifest.files[0] if manifest is not None and manifest.files else None
        return ImportResult(
            model_id=entry.model_id,
            path=data.path,
            gguf_file=entry.card.gguf_file,
            sha256=recorded.sha256 if recorded is not None else "",
            size_bytes=entry.card.storage_size.in_bytes,
            model=model_list_item(entry),
        )

    @post(
        "/download/start",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Download a catalog model's bytes to a node",
        responses=errors(OPENAI, 400, 404, 409, 502, 507),
    )
    async def start_download(
        self, hub: HubService, node: Node, data: DownloadStartRequest
    ) -> DownloadStatus:
        card = data.shard_metadata.model_card if data.shard_metadata is not None else None
        model_id = card.model_id if card is not None else data.model_id
        if model_id is None:
            raise ApiError(
                400, "name the model: shard_metadata.model_card or model_id", code="invalid_request"
            )
        if data.target_node_id != node.node_id:
            # The catalog check happens there too: the card is replicated State.
            body = msgspec.to_builtins(data)
            answer = await hub.forward(data.target_node_id, "POST", "/download/start", body)
            return _relayed(answer)
        node_id, progress = await hub.start_download(data.target_node_id, model_id, card)
        return _status(node_id, progress)

    @delete(
        "/download/{node_id:str}/{model_id:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Cancel a node download (partials kept) or delete its downloaded bytes",
        responses=errors(OPENAI, 400, 404, 409),
    )
    async def delete_download(
        self,
        hub: HubService,
        node: Node,
        node_id: str,
        model_id: str,
        attempt_id: str | None = None,
    ) -> DownloadStatus:
        """``attempt_id`` (optional) binds the cancellation to one exact transfer attempt
        (``/state`` downloads carry it): 409 when that attempt is no longer in flight."""
        alias = _model_id(model_id)
        if attempt_id is not None and not _ATTEMPT_ID.fullmatch(attempt_id):
            raise ApiError(
                400, "attempt_id must be 1 to 64 letters or digits", code="invalid_attempt_id"
            )
        if node_id != node.node_id:
            path = f"/download/{node_id}/{alias}"
            params = None if attempt_id is None else {"attempt_id": attempt_id}
            return _relayed(await hub.forward(node_id, "DELETE", path, None, params))
        found_node, progress = await hub.cancel_download(node_id, alias, attempt_id)
        return _status(found_node, progress)

    @get(
        "/models/remote-code-approvals",
        summary="Deprecated: retained repository-code approvals (always inert)",
    )
    async def remote_code_approvals(self) -> RemoteCodeApprovals:
        return RemoteCodeApprovals()

    @post(
        "/models/remote-code-approvals/{card_id:str}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Deprecated: current cards are authorized by publication or addition",
        responses=errors(OPENAI, 400, 409),
    )
    async def approve_remote_code(
        self, card_id: str, data: ApprovalRequest | None = None
    ) -> RemoteCodeApprovals:
        raise ApiError(
            409,
            f"{card_id}: publication or explicit addition already authorizes current cards; "
            "no approval entry is created",
            code="approval_not_needed",
        )

    @delete(
        "/models/remote-code-approvals/{card_id:str}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Deprecated: remove an inert retained approval",
        responses=errors(OPENAI, 404),
    )
    async def remove_remote_code_approval(self, card_id: str) -> RemoteCodeApprovals:
        raise ApiError(404, f"no retained approval for {card_id}", code="not_found")
