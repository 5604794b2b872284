"""The manager's verbs and its journaled lifecycle operations.

``submit`` validates a request against the current selection (revision fence, for
``activate``/``select`` the retained signed record verified again under the current
trust and a completed generation whose seal still holds, explicit rollback below the highest
selected sequence, explicit acceptance of widened permissions, no disable once
uninstalled, no second operation while one is live) and journals it ``accepted``
before it returns; the work then runs on its own thread, outliving the socket that
asked: it takes the installation's installer fence, becomes ``applying``, checks again,
publishes ``runtime-selection.json`` atomically and becomes ``complete``. Completion
confirms the desired-state change only; the supervisor (``supervisor.py``) starts and
stops owners from the published selection, and process state is observed separately.

Operations survive restarts and are never replayed: at start-up, a record still
``accepted`` or ``applying`` is ``complete`` when its selection was already published,
and otherwise ``recovery_required``, which only an explicit ``recover`` resumes (its
original request, fences checked again). Reusing an operation id with the same
request reads the retained record; with a different request it is refused.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import msgspec

from skulk_core.plugins.answers import (
    Installation,
    OperationSummary,
    OwnerProcess,
    Purged,
)
from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_host.plugin_manager.protocol import (
    MAX_INSTALLATIONS,
    MAX_OPERATIONS,
    TERMINAL_STATES,
    Answer,
    CatalogStatusRequest,
    ConfigureCatalogRequest,
    ConfigureSourceRequest,
    GetRequest,
    InspectReleaseRequest,
    InstallFromCatalogRequest,
    InstallReleaseRequest,
    InstallStatusRequest,
    LifecycleOperation,
    LifecycleRequest,
    ListRequest,
    OperationRequest,
    PurgeRequest,
    ReadCatalogRequest,
    RecoverInstallRequest,
    RecoverRequest,
    RegisterRequest,
    ReloadRuntimeRequest,
    Request,
    Selection,
    SourceStatusRequest,
    SubmitRequest,
)
from skulk_host.plugin_manager.store import Store

if TYPE_CHECKING:
    from skulk_host.plugin_manager.catalog import Catalog
    from skulk_host.plugin_manager.releases import Releases
    from skulk_host.plugin_manager.supervisor import Supervisor

log = logging.getLogger("skulk.plugins.manager")

LIVE_STATES = frozenset({"accepted", "applying"})


class Lifecycle:
    def __init__(
        self, store: Store, releases: Releases | None = None, catalog: Catalog | None = None
    ) -> None:
        self.store = store
        self.releases = releases
        self.catalog = catalog
        self.supervisor: Supervisor | None = None
        # NOTE: one lock for every journal read-modify-write: a submit and the worker
        # finishing another operation must not interleave their checks and writes.
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._reconcile()

    # -- dispatch ----------------------------------------------------------------------

    def installations(self) -> list[Installation]:
        return [self._observe(i) for i in self.store.ids()]

    def handle(self, request: Request) -> Answer:
        match request:
            case ListRequest() | ReloadRuntimeRequest():
                # NOTE: the server answers these itself: they concern its own runtime.
                raise refuse("malformed", "The manager's server answers this request.")
            case RegisterRequest(plugin_id=plugin_id):
                return self.register(plugin_id)
            case GetRequest(plugin_id=plugin_id):
                self._require(plugin_id)
                return self._observe(plugin_id)
            case SubmitRequest(plugin_id=plugin_id, request=lifecycle):
                return self.submit(plugin_id, lifecycle)
            case OperationRequest(plugin_id=plugin_id, operation_id=operation_id):
                return self._retained(plugin_id, operation_id)
            case RecoverRequest(plugin_id=plugin_id, operation_id=operation_id):
                return self.recover(plugin_id, operation_id)
            case PurgeRequest(plugin_id=plugin_id):
                return self.purge(plugin_id)
            case (
                ConfigureSourceRequest()
                | SourceStatusRequest()
                | InspectReleaseRequest()
                | InstallReleaseRequest()
                | InstallStatusRequest()
                | RecoverInstallRequest()
            ):
                if self.releases is None:
                    raise refuse("malformed", "This manager serves no release actions.")
                return self.releases.handle(request)
            case (
                ConfigureCatalogRequest()
                | CatalogStatusRequest()
                | ReadCatalogRequest()
                | InstallFromCatalogRequest()
            ):
                if self.catalog is None:
                    raise refuse("malformed", "This manager serves no catalog.")
                return self.catalog.handle(request)

    def _retained(self, plugin_id: str, operation_id: str) -> LifecycleOperation:
        self._require(plugin_id)
        operation = self.store.operation(plugin_id, operation_id)
        if operation is None:
            raise refuse("not_found", f"{plugin_id} has no operation {operation_id}.")
        return operation

    def _require(self, plugin_id: str) -> None:
        if not self.store.exists(plugin_id):
            raise refuse("not_found", f"No installation {plugin_id} is registered.")

    # -- verbs -------------------------------------------------------------------------

    def register(self, plugin_id: str) -> Installation:
        with self._lock:
            if not self.store.exists(plugin_id):
                if len(self.store.ids()) >= MAX_INSTALLATIONS:
                    raise refuse(
                        "too_large",
                        f"A manager holds at most {MAX_INSTALLATIONS} installations.",
                    )
                self.store.register(plugin_id)
        return self._observe(plugin_id)

    def submit(self, plugin_id: str, request: LifecycleRequest) -> LifecycleOperation:
        with self._lock:
            self._require(plugin_id)
            retained = self.store.operation(plugin_id, request.operation_id)
            if retained is not None:
                if retained.request != request:
                    raise refuse(
                        "malformed",
                        f"Operation {request.operation_id} was used for another request; "
                        "use a new operation id.",
                    )
                return retained
            operations = self.store.operations(plugin_id)
            if len(operations) >= MAX_OPERATIONS:
                raise refuse(
                    "too_large",
                    f"{plugin_id} retains {MAX_OPERATIONS} operations: local maintenance is "
                    "needed before another.",
                )
            live = [op for op in operations if op.state in LIVE_STATES]
            if live:
                raise refuse(
                    "malformed",
                    f"Operation {live[0].operation_id} is {live[0].state}: read it until it "
                    "settles before another change.",
                )
            preview = self._preview(plugin_id, request)
            now = int(time.time())
            operation = LifecycleOperation(
                operation_id=request.operation_id,
                plugin_id=plugin_id,
                request=request,
                state="accepted",
                preview=preview,
                accepted_at=now,
                updated_at=now,
            )
            self.store.record(operation)
        self._start(operation)
        return operation

    def recover(self, plugin_id: str, operation_id: str) -> LifecycleOperation:
        """Explicitly resume one ``recovery_required`` operation with its original
        request (its fences are checked again); any other state is returned unchanged."""
        with self._lock:
            operation = self._retained(plugin_id, operation_id)
            if operation.state != "recovery_required":
                return operation
            live = [op for op in self.store.operations(plugin_id) if op.state in LIVE_STATES]
            if live:
                raise refuse(
                    "malformed",
                    f"Operation {live[0].operation_id} is {live[0].state}: read it until it "
                    "settles before recovering another.",
                )
            preview = self._preview(plugin_id, operation.request)
            operation = self._update(operation, state="accepted", error_code=None, preview=preview)
        self._start(operation)
        return operation

    def purge(self, plugin_id: str) -> Purged:
        """Remove an installation that is uninstalled, or never selected a release, with
        everything it retained (journals, generations, feed credentials). A live one, or
        one with an operation or a download under way, is refused and left unchanged."""
        with self._lock:
            self._require(plugin_id)
            selection = self.store.selection(plugin_id)
            if selection.runtime_digest is not None and not selection.uninstalled:
                raise refuse(
                    "malformed",
                    f"{plugin_id} has a selected release and is not uninstalled: uninstall it "
                    "before purging.",
                )
            live = [op for op in self.store.operations(plugin_id) if op.state in LIVE_STATES]
            if live:
                raise refuse(
                    "busy",
                    f"Operation {live[0].operation_id} is {live[0].state}: let it settle "
                    "before purging.",
                )
            if self.releases is not None and self.releases.installing(plugin_id):
                raise refuse("busy", f"A release download for {plugin_id} is under way.")
            with self.store.fence(plugin_id, wait=0.0) as held:
                if not held:
                    raise refuse("busy", f"{plugin_id} is held by another local command.")
                self.store.purge(plugin_id)
        log.info("%s: purged", plugin_id)
        return Purged(plugin_id=plugin_id, purged=True)

    def _start(self, operation: LifecycleOperation) -> None:
        worker = threading.Thread(
            target=self._apply, args=(operation,), name=f"apply-{operation.operation_id}"
        )
        worker.start()
        self._workers.append(worker)

    def _preview(self, plugin_id: str, request: LifecycleRequest) -> Selection:
        """The selection ``request`` would publish; refuses what it may not do."""
        current = self.store.selection(plugin_id)
        if request.expected_revision != current.revision:
            raise refuse(
                "malformed",
                f"expected_revision {request.expected_revision} is not the current selection "
                f"revision {current.revision}: read the installation again.",
            )
        revision, operation_id = current.revision + 1, request.operation_id
        match request.action:
            case "disable":
                if current.uninstalled:
                    raise refuse("malformed", f"{plugin_id} is uninstalled; disable is refused.")
                return msgspec.structs.replace(
                    current, enabled=False, revision=revision, operation_id=operation_id
                )
            case "uninstall":
                return msgspec.structs.replace(
                    current,
                    enabled=False,
                    uninstalled=True,
                    revision=revision,
                    operation_id=operation_id,
                )
            case "activate" | "select":
                digest = request.runtime_digest
                assert digest is not None  # LifecycleRequest checks it
                if self.releases is None:
                    raise refuse("publisher_untrusted", "This manager holds no release trust.")
                self.releases.verify_staged(plugin_id, digest)  # current trust, host fit
                stager = self.store.stager(plugin_id)
                stager.completion(digest)  # a completed generation whose seal holds
                intent = stager.intent(digest)
                if intent.sequence < current.highest_sequence and not request.rollback:
                    raise refuse(
                        "rollback",
                        f"Release sequence {intent.sequence} is below the highest selected "
                        f"sequence {current.highest_sequence}: a rollback must be explicit.",
                    )
                if current.runtime_digest is not None and not request.accept_permissions:
                    held = set(stager.intent(current.runtime_digest).permissions)
                    if not set(intent.permissions) <= held:
                        raise refuse(
                            "malformed",
                            "This release asks for permissions the selected one does not "
                            "hold: accept them explicitly.",
                        )
                return Selection(
                    runtime_digest=digest,
                    enabled=request.action == "activate",
                    uninstalled=False,
                    highest_sequence=max(current.highest_sequence, intent.sequence),
                    revision=revision,
                    operation_id=operation_id,
                )

    def _update(self, operation: LifecycleOperation, **fields: object) -> LifecycleOperation:
        updated = msgspec.structs.replace(operation, updated_at=int(time.time()), **fields)
        self.store.record(updated)
        return updated

    def _apply(self, operation: LifecycleOperation) -> None:
        plugin_id = operation.plugin_id
        with self.store.fence(plugin_id) as held, self._lock:
            if not held:
                self._update(operation, state="recovery_required", error_code="fence_busy")
                return
            operation = self._update(operation, state="applying")
            try:
                preview = self._preview(plugin_id, operation.request)
            except PluginRefusal as refusal:
                self._update(operation, state="failed", error_code=refusal.reason)
                return
            except OSError:
                self._update(operation, state="recovery_required", error_code="local_io")
                return
            self.store.publish(plugin_id, preview)
            self._update(operation, state="complete", preview=preview)
        log.info("%s: operation %s complete", plugin_id, operation.operation_id)

    # -- restart -----------------------------------------------------------------------

    def _reconcile(self) -> None:
        """Settle what a previous manager left live: never replayed."""
        for plugin_id in self.store.ids():
            published = self.store.selection(plugin_id).operation_id
            for operation in self.store.operations(plugin_id):
                if operation.state not in LIVE_STATES:
                    continue
                if operation.operation_id == published:
                    self._update(operation, state="complete")
                else:
                    self._update(operation, state="recovery_required", error_code="interrupted")

    # -- observation -------------------------------------------------------------------

    def _observe(self, plugin_id: str) -> Installation:
        selection = self.store.selection(plugin_id)
        operations = self.store.operations(plugin_id)
        latest = operations[-1] if operations else None
        digest = selection.runtime_digest
        release = (
            None
            if digest is None or self.releases is None
            else self.releases.display(plugin_id, digest)
        )
        return Installation(
            plugin_id=plugin_id,
            release=release,
            reload_runtime=False,
            selection=None if selection.revision == 0 else selection,
            selected_digest=selection.runtime_digest,
            selection_revision=selection.revision,
            enabled=selection.enabled,
            uninstalled=selection.uninstalled,
            service=(
                OwnerProcess(status="not_supervised")
                if self.supervisor is None
                else self.supervisor.observe(plugin_id)
            ),
            stale=False,
            operation_id=None if latest is None else latest.operation_id,
            operation_state=None if latest is None else latest.state,
            error_code=None if latest is None else latest.error_code,
            operations=[
                OperationSummary(operation_id=op.operation_id, state=op.state)
                for op in operations
                if op.state not in TERMINAL_STATES or op is latest
            ],
        )

    def join(self, timeout: float = 35.0) -> None:
        """Wait for accepted work (shutdown); work still waiting stays journaled."""
        for worker in self._workers:
            worker.join(timeout)
