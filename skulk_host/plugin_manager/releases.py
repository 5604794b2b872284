"""The manager's release actions: one trusted HTTPS source per installation, metadata
inspection, and journaled download + offline staging.

``configure_source`` changes the source under its revision fence: initial setup needs
the directory and the trust; trust only advances (``advance_trust``: newer, unexpired,
revocations kept); the write-only token is written to a protected file before its
opaque reference is published (replaced tokens stay as history), and moving a
credential-bearing source needs the token again or ``clear_token``. ``inspect_release``
fetches only the metadata, verifies it (trust, host, rollback floor) and retains the
exact bytes. ``install`` reverifies those bytes, journals ``accepted`` and returns;
its own thread then downloads (``downloading``), takes the installer fence and stages
(``staging``) to ``staged``; any failure is ``recovery_required`` with
``download_failed`` or ``installation_failed``, and work a previous manager left live
is ``recovery_required`` with ``installation_interrupted``: never rerun by itself, only
by an explicit ``recover_install`` (same digest, reverified, at most eight attempts).
"""

from __future__ import annotations

import secrets
import ssl
import threading
import time
from pathlib import Path

import msgspec

from skulk_core.plugins.answers import ReleaseDisplay, ReleaseReview, SourceStatus
from skulk_core.plugins.documents import HostFacts
from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_core.plugins.review import reviewed_release
from skulk_core.plugins.verify import (
    ReleaseFloor,
    VerifiedRelease,
    advance_release_floor,
    check_host,
    verify_release,
)
from skulk_host.fsutil import atomic_write, ensure_private_dir
from skulk_host.plugin_manager.install_journal import LIVE_INSTALL_STATES, InstallJournal
from skulk_host.plugin_manager.protocol import (
    MAX_OPERATIONS,
    MAX_RECOVERY_ATTEMPTS,
    Answer,
    ConfigureSourceRequest,
    InspectReleaseRequest,
    InstallOperation,
    InstallReleaseRequest,
    InstallRequest,
    InstallStatus,
    InstallStatusRequest,
    RecoverInstallRequest,
    ReleaseRequest,
    SourceStatusRequest,
    SourceUpdate,
)
from skulk_host.plugin_manager.source_record import SourceRecord, next_source
from skulk_host.plugin_manager.store import Store
from skulk_host.plugin_release.feed import FeedClient, FeedSource
from skulk_host.plugin_release.host import host_facts
from skulk_host.plugin_release.source import download_release

__all__ = ["LIVE_INSTALL_STATES", "Releases", "SourceRecord"]


class Releases:
    def __init__(self, store: Store, tls: ssl.SSLContext, host: HostFacts | None = None) -> None:
        self.store = store
        self.tls = tls
        self.host = host or host_facts()
        # NOTE: one lock for source and install journal read-modify-writes, as in
        # lifecycle.py; network transfer and staging run outside it.
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._journal = InstallJournal(store)
        self._journal.interrupt_live()

    def handle(self, request: ReleaseRequest) -> Answer:
        match request:
            case ConfigureSourceRequest(plugin_id=plugin_id, request=update):
                return self.configure(plugin_id, update)
            case SourceStatusRequest(plugin_id=plugin_id):
                self._require(plugin_id)
                return self._status(plugin_id, self.source(plugin_id))
            case InspectReleaseRequest(plugin_id=plugin_id):
                return self.inspect(plugin_id)
            case InstallReleaseRequest(plugin_id=plugin_id, request=install):
                return self.install(plugin_id, install)
            case RecoverInstallRequest(
                plugin_id=plugin_id, operation_id=operation_id, expected_source_revision=revision
            ):
                return self.recover(plugin_id, operation_id, revision)
            case InstallStatusRequest(plugin_id=plugin_id):
                self._require(plugin_id)
                operations = self._journal.operations(plugin_id)
                return InstallStatus(operation=operations[-1] if operations else None)

    # -- files -------------------------------------------------------------------------

    def _require(self, plugin_id: str) -> None:
        if not self.store.exists(plugin_id):
            raise refuse("not_found", f"No installation {plugin_id} is registered.")

    def _path(self, plugin_id: str, *parts: str) -> Path:
        return self.store.directory(plugin_id).joinpath(*parts)

    def source(self, plugin_id: str) -> SourceRecord:
        path = self._path(plugin_id, "source.json")
        if not path.is_file():
            return SourceRecord()
        return msgspec.json.decode(path.read_bytes(), type=SourceRecord)

    def _token(self, plugin_id: str, source: SourceRecord) -> str | None:
        if source.credential_reference is None:
            return None
        path = self._path(plugin_id, "credentials", f"{source.credential_reference}.token")
        try:
            return path.read_text()
        except OSError:
            raise refuse(
                "source_invalid", "The stored feed credential cannot be read: supply it again."
            ) from None

    def display(self, plugin_id: str, runtime_digest: str) -> ReleaseDisplay | None:
        """The selected release's names from its retained signed record, for display
        only (not verified here, never a trust decision); ``None`` when unreadable."""
        path = self._path(plugin_id, "reviews", f"{runtime_digest}.json")
        try:
            signed = msgspec.json.decode(path.read_bytes())["signed"]
            return ReleaseDisplay(
                bundle_id=str(signed["bundle_id"]),
                title=None if signed.get("title") is None else str(signed["title"]),
                bundle_version=str(signed["version"]),
                publisher=str(signed["publisher"]),
                sequence=int(signed["sequence"]),
            )
        except (OSError, msgspec.DecodeError, KeyError, TypeError, ValueError):
            return None

    def installing(self, plugin_id: str) -> bool:
        """Whether a download or staging for ``plugin_id`` is under way."""
        with self._lock:
            return self._journal.live(plugin_id)

    def _status(self, plugin_id: str, source: SourceRecord) -> SourceStatus:
        ready = False
        if source.credential_reference is not None:
            path = self._path(plugin_id, "credentials", f"{source.credential_reference}.token")
            ready = path.is_file()
        return SourceStatus(
            revision=source.revision,
            configured=source.base_url is not None and source.trust is not None,
            credential_reference=source.credential_reference,
            credential_ready=ready,
            trust_revision=None if source.trust is None else source.trust.revision,
        )

    # -- source ------------------------------------------------------------------------

    def configure(self, plugin_id: str, update: SourceUpdate) -> SourceStatus:
        with self._lock:
            self._require(plugin_id)
            current = self.source(plugin_id)
            record = next_source(
                current,
                update,
                installing=self._journal.live(plugin_id),
                now=int(time.time()),
                new_reference=secrets.token_hex(16),
            )
            if update.token is not None:
                assert record.credential_reference is not None
                credentials = self._path(plugin_id, "credentials")
                ensure_private_dir(credentials)
                # NOTE: the token is on disk before its reference is published; a
                # replaced token stays as protected history.
                token_file = credentials / f"{record.credential_reference}.token"
                atomic_write(token_file, update.token.encode())
            atomic_write(self._path(plugin_id, "source.json"), msgspec.json.encode(record))
            return self._status(plugin_id, record)

    def _client(self, plugin_id: str, source: SourceRecord) -> FeedClient:
        if source.base_url is None or source.trust is None:
            raise refuse("source_invalid", "This installation has no configured release source.")
        return FeedClient(FeedSource(source.base_url, self._token(plugin_id, source)), self.tls)

    # -- inspect -----------------------------------------------------------------------

    def _verify(self, raw: bytes, source: SourceRecord) -> VerifiedRelease:
        assert source.trust is not None
        release = verify_release(raw, source.trust, int(time.time()))
        check_host(release.claims, self.host)
        advance_release_floor(source.release_floor, release)  # a rollback is refused here
        return release

    def verify_staged(self, plugin_id: str, runtime_digest: str) -> None:
        """Activation's repeat of current trust: the retained signed record of a staged
        release verified again (publisher known and unrevoked, unexpired, host fit)."""
        source = self.source(plugin_id)
        reviewed = self._path(plugin_id, "reviews", f"{runtime_digest}.json")
        if source.trust is None or not reviewed.is_file():
            raise refuse(
                "publisher_untrusted",
                "This runtime has no signed release record under this installation's trust.",
            )
        release = verify_release(reviewed.read_bytes(), source.trust, int(time.time()))
        if release.runtime_digest != runtime_digest:
            raise refuse("digest_mismatch", "The retained release record names another runtime.")
        check_host(release.claims, self.host)

    def inspect(self, plugin_id: str) -> ReleaseReview:
        self._require(plugin_id)
        source = self.source(plugin_id)
        with self._client(plugin_id, source) as client:
            raw = client.metadata(source.metadata_filename)
        release = self._verify(raw, source)
        reviews = self._path(plugin_id, "reviews")
        ensure_private_dir(reviews)
        target = reviews / f"{release.runtime_digest}.json"
        if not target.exists() and len(list(reviews.glob("*.json"))) >= MAX_OPERATIONS:
            raise refuse(
                "too_large", f"{MAX_OPERATIONS} reviews are retained: local maintenance is needed."
            )
        atomic_write(target, raw)
        return reviewed_release(release, source.revision)

    # -- install -----------------------------------------------------------------------

    def install(self, plugin_id: str, request: InstallRequest) -> InstallOperation:
        with self._lock:
            self._require(plugin_id)
            operations = self._journal.operations(plugin_id)
            retained = next(
                (op for op in operations if op.operation_id == request.operation_id), None
            )
            if retained is not None:
                if retained.request != request:
                    raise refuse(
                        "malformed",
                        f"Operation {request.operation_id} was used for another request; use a "
                        "new operation id.",
                    )
                return retained
            source = self.source(plugin_id)
            if request.expected_source_revision != source.revision:
                raise refuse(
                    "malformed",
                    f"expected_source_revision {request.expected_source_revision} is not the "
                    f"source revision {source.revision}: read the source status again.",
                )
            if any(op.state in LIVE_INSTALL_STATES for op in operations):
                raise refuse("malformed", "Another installation download runs for this plugin.")
            if len(operations) >= MAX_OPERATIONS:
                raise refuse("too_large", "Install history is full: local maintenance is needed.")
            reviewed = self._path(plugin_id, "reviews", f"{request.runtime_digest}.json")
            if not reviewed.is_file():
                raise refuse(
                    "malformed", "Inspect the release first; that digest was not reviewed."
                )
            release = self._verify(reviewed.read_bytes(), source)
            now = int(time.time())
            operation = InstallOperation(
                operation_id=request.operation_id,
                plugin_id=plugin_id,
                request=request,
                review=reviewed_release(release, source.revision),
                state="accepted",
                accepted_at=now,
                updated_at=now,
            )
            operation = self._journal.record(operation)
        worker = threading.Thread(
            target=self._run,
            args=(operation, release, source),
            name=f"install-{request.operation_id}",
        )
        worker.start()
        self._workers.append(worker)
        return operation

    def recover(
        self, plugin_id: str, operation_id: str, expected_revision: int
    ) -> InstallOperation:
        """Explicitly retry one ``recovery_required`` install for the same exact digest:
        the original review is verified again against current trust; cached downloads
        and the interrupted generation are kept (the latter moved aside as evidence).
        Any other state is returned unchanged."""
        with self._lock:
            self._require(plugin_id)
            operations = self._journal.operations(plugin_id)
            operation = next((op for op in operations if op.operation_id == operation_id), None)
            if operation is None:
                raise refuse("malformed", f"{plugin_id} has no install operation {operation_id}.")
            if operation.state != "recovery_required":
                return operation
            if operation.attempt >= MAX_RECOVERY_ATTEMPTS:
                raise refuse(
                    "malformed", f"At most {MAX_RECOVERY_ATTEMPTS} recovery attempts are made."
                )
            source = self.source(plugin_id)
            if expected_revision != source.revision:
                raise refuse(
                    "malformed",
                    f"expected_source_revision {expected_revision} is not the source revision "
                    f"{source.revision}: read the source status again.",
                )
            if any(op.state in LIVE_INSTALL_STATES for op in operations):
                raise refuse("malformed", "Another installation download runs for this plugin.")
            reviewed = self._path(plugin_id, "reviews", f"{operation.request.runtime_digest}.json")
            release = self._verify(reviewed.read_bytes(), source)
            operation = self._journal.record(
                operation,
                state="accepted",
                error_code=None,
                attempt=operation.attempt + 1,
                attempt_source_revision=source.revision,
            )
        worker = threading.Thread(
            target=self._run, args=(operation, release, source), name=f"recover-{operation_id}"
        )
        worker.start()
        self._workers.append(worker)
        return operation

    def _run(
        self, operation: InstallOperation, release: VerifiedRelease, source: SourceRecord
    ) -> None:
        plugin_id = operation.plugin_id
        artifacts = self._path(plugin_id, "artifacts", release.runtime_digest)
        operation = self._journal.record(operation, state="downloading")
        try:
            with self._client(plugin_id, source) as client:
                fetched = download_release(client, release, artifacts)
        except PluginRefusal:
            self._journal.record(operation, state="recovery_required", error_code="download_failed")
            return
        operation = self._journal.record(operation, downloaded_bytes=fetched)
        with self.store.fence(plugin_id) as held:
            if not held:
                self._journal.record(
                    operation, state="recovery_required", error_code="installation_failed"
                )
                return
            operation = self._journal.record(operation, state="staging")
            stager = self.store.stager(plugin_id)
            try:
                if operation.attempt > 0:
                    stager.recover(release, artifacts, self.host)
                else:
                    stager.stage(release, artifacts, self.host)
            except (PluginRefusal, OSError):
                self._journal.record(
                    operation, state="recovery_required", error_code="installation_failed"
                )
                return
        with self._lock:
            current = self.source(plugin_id)
            floor: ReleaseFloor | None
            try:
                floor = advance_release_floor(current.release_floor, release)
            except PluginRefusal:
                floor = current.release_floor  # a higher release was staged meanwhile
            atomic_write(
                self._path(plugin_id, "source.json"),
                msgspec.json.encode(msgspec.structs.replace(current, release_floor=floor)),
            )
            self._journal.record(operation, state="staged")

    def join(self, timeout: float = 35.0) -> None:
        for worker in self._workers:
            worker.join(timeout)
