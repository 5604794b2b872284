"""The store on one node: its role (when it is the store host), its clients, evictions.

- On a store host (``model_store.store_host: true``) :meth:`StoreService.start` binds
  the internal transport on ``store_port`` (same address as the API) and announces
  the role through the event log (``AnnounceStoreHost``); a node that leaves the
  cluster leaves the role with it.
- On every node, the public ``/store/...`` routes reach the store through
  :meth:`StoreService.relay` (the internal transport, wherever the store is), and
  an eviction (``StoreModelEvicted``, ordered when the store deletes a model) drops
  this node's copy of that model; a purge (``StagingPurged``, ``POST
  /store/purge-staging``) drops its copies staged from the store, never the store's
  own. Every node lends its cached copies to the store host's reconciler
  (:mod:`skulk_daemon.store.exports`); the store host runs that reconciler.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from skulk_core.ids import ModelId, new_command_id
from skulk_core.state.commands import AnnounceStoreHost, EvictStoreModel, PurgeStaging
from skulk_core.state.state import StoreHost
from skulk_daemon.errors import ApiError
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.hub.service import HubService
from skulk_daemon.node.node import Node
from skulk_daemon.store.cache import in_use, is_staged, remove_model_dir, report_deleted
from skulk_daemon.store.exports import Exports
from skulk_daemon.store.host import StoreHostService
from skulk_daemon.store.listener import StoreListener
from skulk_daemon.store.locate import store_urls
from skulk_daemon.store.optimizer import Optimizer
from skulk_daemon.store.reconcile import Reconciler
from skulk_daemon.store.transport import store_app

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

RELAY_SECONDS: Final = 30.0
NOT_CONFIGURED: Final = "Store not configured"


class StoreUnavailable(Exception):
    pass


class StoreService:
    def __init__(self, node: Node, hub: HubService) -> None:
        self._node = node
        self._hub = hub
        self.host: StoreHostService | None = None
        self.exports = Exports(node)
        self.reconciler: Reconciler | None = None
        self._listener: StoreListener | None = None
        self.optimizer = Optimizer(node, lambda: self.host)
        self._seen_evictions: tuple[object, object, object] | None = None
        self._removals: set[asyncio.Task[None]] = set()
        node.on_applied(self._on_applied)

    # -- the store host's role -------------------------------------------------------

    async def start(self) -> None:
        config = self._node.config.model_store
        if not config.store_host:
            return
        host = StoreHostService(self._node, self._hub.client)
        await asyncio.to_thread(host.adopt_existing)
        bind = self._node.settings.host
        reconciler = Reconciler(self._node, host)
        try:
            self._listener = StoreListener(
                store_app(host, self._evict, reconciler, lambda: self._node.config, self.optimizer),
                bind,
                config.store_port,
            )
        except OSError as exc:
            log.error(
                "the model store cannot listen on %s:%d (%s); this node does not serve the "
                "store (set model_store.store_port to a free port)",
                bind,
                config.store_port,
                exc,
            )
            return
        self.host = host
        self.reconciler = reconciler
        reconciler.start()
        log.info("serving the model store from %s on port %d", host.root, config.store_port)
        self._node.report(
            AnnounceStoreHost(
                command_id=new_command_id(),
                node_id=self._node.node_id,
                store=StoreHost(port=config.store_port),
            )
        )

    async def stop(self) -> None:
        await self.optimizer.stop()
        if self.reconciler is not None:
            await self.reconciler.stop()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None

    async def _evict(self, model_id: str) -> None:
        await self._node.submit(
            EvictStoreModel(
                command_id=new_command_id(),
                model_id=ModelId(model_id),
                evicted_at=datetime.now(UTC),
            )
        )

    # -- every node ------------------------------------------------------------------

    def configured(self) -> bool:
        return bool(self._node.state.store_hosts)

    async def relay(self, method: str, path: str, body: object | None = None) -> tuple[int, object]:
        """(status, JSON body) of the store's answer; 503 when there is no store, 502
        when it cannot be reached."""
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        urls = store_urls(self._node)
        if not urls:
            raise ApiError(503, NOT_CONFIGURED, code="store_not_configured")
        failures: list[str] = []
        async with httpx.AsyncClient(timeout=RELAY_SECONDS) as client:
            for base in urls:
                try:
                    answer = await client.request(method, f"{base}{path}", json=body)
                except httpx.HTTPError as exc:
                    failures.append(f"{base}: {type(exc).__name__}")
                    continue
                try:
                    return answer.status_code, answer.json()
                except ValueError:
                    return 502, {"error": {"message": "the store answered no JSON"}}
        raise StoreUnavailable("; ".join(failures) or "no address")

    @staticmethod
    def model_path(model_id: str, suffix: str = "") -> str:
        return f"/models/{quote(model_id, safe='')}{suffix}"

    async def purge_staging(self, model_id: ModelId | None) -> str:
        """Order every node to drop its staged copies (of ``model_id``, or all); the
        command id. The store's own copy is never touched."""
        command = PurgeStaging(
            command_id=new_command_id(), model_id=model_id, purged_at=datetime.now(UTC)
        )
        await self._node.submit(command)
        return command.command_id

    def _on_applied(self) -> None:
        state = self._node.state
        marks = (state.store_evictions, state.staging_purges, state.staging_purged_all_at)
        if self._seen_evictions is not None and all(
            a is b for a, b in zip(marks, self._seen_evictions, strict=True)
        ):
            return
        self._seen_evictions = marks
        if not state.store_evictions and not state.staging_purges and marks[2] is None:
            return
        root = self._node.models_dir.resolve()
        busy = in_use(self._node)
        for model in list(self._node.installed_models):
            model_id = model.card.model_id
            location = Path(model.location).resolve()
            if model_id in busy or location.parent != root or read_manifest(location) is None:
                continue
            evicted_at = state.store_evictions.get(model_id)
            evicted = evicted_at is not None and model.installed_at <= evicted_at.timestamp()
            purges = (state.staging_purges.get(model_id), marks[2])
            purged = is_staged(location) and any(
                at is not None and model.installed_at <= at.timestamp() for at in purges
            )
            if not evicted and not purged:
                continue
            self._node.installed_models[:] = [
                m for m in self._node.installed_models if m is not model
            ]
            why = "the store deleted" if evicted else "staging purged"
            log.info("%s %s: dropping its copy in %s", why, model_id, location)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                remove_model_dir(location)
                continue
            task = loop.create_task(self._drop(location, model_id, report=not evicted))
            self._removals.add(task)
            task.add_done_callback(self._removals.discard)

    async def _drop(self, location: Path, model_id: ModelId, *, report: bool) -> None:
        await asyncio.to_thread(remove_model_dir, location)
        if report:  # an eviction already dropped every report of the model from State
            report_deleted(self._node, model_id)
