"""The store host's reconciler: node-cache copies the store lacks are imported.

Every :data:`RECONCILE_SECONDS` (or ``SKULK_STORE_RECONCILE_SECONDS``), and on
``POST /store/reconciliation/rescan``, the store host reads each live member's
``GET /store/storage`` over its advertised API, plans with
:func:`skulk_core.store.reconcile.plan_imports` (tombstoned aliases are never
recreated), asks the source node for an export capability (``POST
/store/internal/exports``) and runs the import (:mod:`skulk_daemon.store.imports`,
the code behind the listener's ``POST /imports``). What it saw and did is ``GET
/store/reconciliation``. Automatic imports are on (``inventory_only`` false).

Both settings are read live from this node's configuration: with
``model_store.reconcile_inventory_only`` a pass lists the identities it discovers
(``pending``) and imports nothing; when ``model_store.store_host`` or
``model_store.reconcile_enabled`` is false the loop goes idle and re-checks its
eligibility every :data:`ELIGIBILITY_SECONDS`, resuming scans as soon as the node is an
enabled store host again, without a restart. A pass already running finishes, and
the loop sleeps its interval before the next eligibility check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Final

import msgspec

from skulk_core.ids import NodeId
from skulk_core.store.answers import (
    LOCATION_NODE,
    DiscoveredIdentity,
    NodeStorage,
    ReconcileFailure,
    ReconciliationStatus,
)
from skulk_core.store.reconcile import MAX_FAILURES_KEPT, CacheCopy, plan_imports
from skulk_daemon.node.node import Node
from skulk_daemon.store.host import StoreHostService
from skulk_daemon.store.imports import ImportFailed, ImportRecord, ImportRequest, run_import

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

RECONCILE_SECONDS: Final = 60.0
RECONCILE_ENV: Final = "SKULK_STORE_RECONCILE_SECONDS"
"""Overrides :data:`RECONCILE_SECONDS` (a positive number of seconds)."""
FIRST_PASS_SECONDS: Final = 10.0
HTTP_SECONDS: Final = 10.0
EXPORTS_PATH: Final = "/store/internal/exports"
ELIGIBILITY_SECONDS: Final = 10.0
_storage = msgspec.json.Decoder(NodeStorage)


class Reconciler:
    def __init__(self, node: Node, store: StoreHostService) -> None:
        self._node = node
        self._store = store
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._state = "idle"
        self._scanned = 0
        self._discovered = 0
        self._imported = 0
        self._pending: list[str] = []
        self._tombstoned: tuple[str, ...] = ()
        self._failures: list[ReconcileFailure] = []
        self._last_verified_at: int | None = None
        self._inventory_only = False
        self._identities: list[CacheCopy] = []
        self._eligibility_checks = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def eligible(self) -> str | None:
        """Why automatic scans are off now (None: this node is an enabled store host)."""
        config = self._node.config.model_store
        if not config.store_host:
            return "this node is no longer a store host (model_store.store_host is false)"
        if not config.reconcile_enabled:
            return "automatic reconciliation is disabled (model_store.reconcile_enabled)"
        return None

    def status(self) -> ReconciliationStatus:
        off = self.eligible()
        return ReconciliationStatus(
            state=self._state,
            inventory_only=self._node.config.model_store.reconcile_inventory_only,
            automatic=off is None,
            disabled_reason=off,
            eligibility_checks=self._eligibility_checks,
            scanned_nodes=self._scanned,
            discovered=self._discovered,
            imported=self._imported,
            pending=list(self._pending),
            discovered_identities=[
                DiscoveredIdentity(
                    model_id=c.model_id,
                    node_id=c.node_id,
                    installed_identity=f"{c.model_id}@{c.manifest_sha256}",
                    size_bytes=c.size_bytes,
                )
                for c in self._identities
            ],
            tombstoned=list(self._tombstoned),
            failures=list(self._failures),
            last_verified_at=self._last_verified_at,
        )

    async def rescan(self) -> ReconciliationStatus:
        """One immediate pass (after any pass already running); the status after it."""
        await self.reconcile()
        return self.status()

    async def _run(self) -> None:
        interval = reconcile_seconds()
        await asyncio.sleep(min(FIRST_PASS_SECONDS, interval))
        idle = False
        while True:
            off = self.eligible()
            if off is not None:
                if not idle:
                    log.info("store reconciliation is idle: %s", off)
                idle = True
                self._eligibility_checks += 1
                await asyncio.sleep(ELIGIBILITY_SECONDS)
                continue
            if idle:
                log.info("store reconciliation resumes")
                idle = False
            try:
                await self.reconcile()
            except Exception:
                log.exception("a store reconciliation pass failed")
                self._state = "idle"
            await asyncio.sleep(interval)

    async def reconcile(self) -> None:
        async with self._lock:
            self._state = "scanning"
            try:
                await self._pass()
            finally:
                self._state = "idle"
                if not self._inventory_only:
                    self._pending = []

    async def _pass(self) -> None:
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        copies, urls = await self._inventory()
        plan = plan_imports(
            copies,
            held=set(self._store.model_ids()),
            tombstoned=set(self._store.tombstones.current.aliases()),
        )
        self._discovered, self._tombstoned = plan.discovered, plan.tombstoned
        self._pending = [c.model_id for c in plan.imports]
        self._identities = list(plan.imports)
        self._inventory_only = self._node.config.model_store.reconcile_inventory_only
        if self._inventory_only:
            # Listed, never imported: the identities stay pending for the operator.
            self._last_verified_at = int(time.time())
            return
        if plan.imports:
            self._state = "importing"
        for copy in plan.imports:
            try:
                await self._import(copy, urls[copy.node_id])
                self._imported += 1
            except ImportFailed as exc:
                self._fail(copy, exc.message)
            except httpx.HTTPError as exc:
                self._fail(copy, f"the source node could not be reached: {type(exc).__name__}")
            finally:
                self._pending = [m for m in self._pending if m != copy.model_id]
        self._last_verified_at = int(time.time())

    def _fail(self, copy: CacheCopy, message: str) -> None:
        log.warning("importing %s from %s failed: %s", copy.model_id, copy.node_id, message)
        failure = ReconcileFailure(
            model_id=copy.model_id, node_id=copy.node_id, error=message, at=int(time.time())
        )
        self._failures = [*self._failures, failure][-MAX_FAILURES_KEPT:]

    async def _inventory(self) -> tuple[list[CacheCopy], dict[str, str]]:
        """Every other live member's complete node-cache copies, and its API URL."""
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        view = self._node.view()
        copies: list[CacheCopy] = []
        urls: dict[str, str] = {}
        scanned = 0
        async with httpx.AsyncClient(timeout=HTTP_SECONDS) as client:
            for node_id in sorted(view.state.topology.nodes):
                if node_id == self._node.node_id:
                    continue
                reading = view.telemetry.get(NodeId(node_id))
                for api_url in () if reading is None else reading.resources.api_urls:
                    try:
                        answer = await client.get(f"{api_url.rstrip('/')}/store/storage")
                        if answer.status_code != 200:
                            continue
                        body = _storage.decode(answer.content)
                    except (httpx.HTTPError, msgspec.ValidationError, msgspec.DecodeError):
                        continue  # unreachable, or not a /store/storage answer
                    scanned += 1
                    urls[node_id] = api_url.rstrip("/")
                    copies.extend(_copies(node_id, body))
                    break
        self._scanned = scanned
        return copies, urls

    async def _import(self, copy: CacheCopy, api_url: str) -> None:
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        async with httpx.AsyncClient(timeout=HTTP_SECONDS) as client:
            answer = await client.post(
                f"{api_url}{EXPORTS_PATH}",
                json={
                    "model_id": copy.model_id,
                    "manifest_sha256": copy.manifest_sha256,
                    "target_node_id": self._node.node_id,
                },
            )
        if answer.status_code != 200:
            raise ImportFailed(answer.status_code, f"the source refused the export: {answer.text}")
        grant = answer.json()
        try:
            record = msgspec.convert(grant["record"], ImportRecord)
            token = str(grant["capability_token"])
        except (KeyError, TypeError, msgspec.ValidationError) as exc:
            raise ImportFailed(502, f"the source's export grant is malformed: {exc}") from None
        request = ImportRequest(
            record=record,
            source_base_url=f"{api_url}{EXPORTS_PATH}",
            capability_token=token,
            target_node_id=self._node.node_id,
        )
        if record.card.model_id != copy.model_id:
            raise ImportFailed(409, "the source's record names another model")
        await run_import(self._store, request)


def reconcile_seconds() -> float:
    raw = os.environ.get(RECONCILE_ENV, "").strip()
    try:
        value = float(raw) if raw else RECONCILE_SECONDS
    except ValueError:
        return RECONCILE_SECONDS
    return value if value > 0 else RECONCILE_SECONDS


def _copies(node_id: str, storage: NodeStorage) -> list[CacheCopy]:
    """The complete, verified node-cache copies a node's ``/store/storage`` reports."""
    return [
        CacheCopy(
            node_id=node_id,
            model_id=item.model_id,
            manifest_sha256=item.manifest_sha256,
            size_bytes=item.size_bytes,
        )
        for item in storage.artifacts
        if item.location_kind == LOCATION_NODE
        and item.manifest_complete
        and item.verification_state == "verified"
        and item.manifest_sha256 is not None
    ]
