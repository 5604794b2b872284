"""The host's one signed catalog: discovery only, it selects, stages and installs nothing.

``configure_catalog`` sets the catalog address and the discovery trust under the
catalog fence, with the release source's rules (initial setup needs the address and the
trust, trust only advances and keeps its revocations, moving the catalog needs its
credential again). ``read_catalog`` fetches the document, verifies it against the
discovery trust (``verify_catalog``) and moves the accepted revision forward per
publisher (an older revision, or another document at the accepted one, is refused as a
rollback); it returns the review, without addresses or credentials. One catalog
operation runs at a time; another is refused, not queued.
"""

from __future__ import annotations

import secrets
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import msgspec

from skulk_core.plugins.answers import CatalogInstalled, CatalogReview, SourceStatus
from skulk_core.plugins.documents import CATALOG_WINDOW, CatalogEntry, HostFacts
from skulk_core.plugins.errors import refuse
from skulk_core.plugins.review import listing, reviewed_catalog
from skulk_core.plugins.trust import PublisherTrust, advance_trust, parse_trust
from skulk_core.plugins.verify import CatalogFloor, matches_host, verify_catalog
from skulk_host.fsutil import atomic_write, ensure_private_dir
from skulk_host.plugin_manager.protocol import (
    Answer,
    CatalogRequest,
    CatalogStatusRequest,
    CatalogUpdate,
    ConfigureCatalogRequest,
    InstallFromCatalogRequest,
    ReadCatalogRequest,
    SourceUpdate,
)
from skulk_host.plugin_release.feed import FeedClient, FeedSource
from skulk_host.plugin_release.source import read_catalog

if TYPE_CHECKING:
    from skulk_host.plugin_manager.releases import Releases

LABEL: Final = "catalog address"
RETAINED_DOCUMENTS: Final = 4
"""Catalog documents kept beyond the accepted ones (the newest few)."""


class CatalogRecord(msgspec.Struct, frozen=True, kw_only=True):
    revision: int = 0
    base_url: str | None = None
    document_filename: str = "catalog.json"
    trust: PublisherTrust | None = None
    credential_reference: str | None = None
    floors: dict[str, CatalogFloor] = msgspec.field(default_factory=dict)


class Catalog:
    def __init__(
        self,
        root: Path,
        tls: ssl.SSLContext,
        host: HostFacts,
        releases: Releases | None = None,
        register: Callable[[str], object] | None = None,
    ) -> None:
        self.directory = root / "catalog"
        self.tls = tls
        self.host = host
        self.releases = releases
        self.register = register
        """Registers a new installation (the lifecycle's ``register``, with its bound)."""
        self._busy = threading.Lock()

    def handle(self, request: CatalogRequest) -> Answer:
        # NOTE: a non-blocking lock: a second catalog operation is refused at once with
        # the spec's sentence instead of waiting behind a slow catalog server.
        if not self._busy.acquire(blocking=False):
            raise refuse(
                "malformed", "Another catalog read, install or source change is in progress."
            )
        try:
            match request:
                case ConfigureCatalogRequest(request=update):
                    return self.configure(update)
                case CatalogStatusRequest():
                    return self._status(self._record())
                case ReadCatalogRequest():
                    return self.read()
                case InstallFromCatalogRequest():
                    return self.install(request)
        finally:
            self._busy.release()

    def _record(self) -> CatalogRecord:
        path = self.directory / "source.json"
        if not path.is_file():
            return CatalogRecord()
        return msgspec.json.decode(path.read_bytes(), type=CatalogRecord)

    def _save(self, record: CatalogRecord) -> None:
        ensure_private_dir(self.directory)
        atomic_write(self.directory / "source.json", msgspec.json.encode(record))

    def _token_path(self, reference: str) -> Path:
        return self.directory / "credentials" / f"{reference}.token"

    def _status(self, record: CatalogRecord) -> SourceStatus:
        reference = record.credential_reference
        return SourceStatus(
            revision=record.revision,
            configured=record.base_url is not None and record.trust is not None,
            credential_reference=reference,
            credential_ready=reference is not None and self._token_path(reference).is_file(),
            trust_revision=None if record.trust is None else record.trust.revision,
        )

    def configure(self, update: CatalogUpdate) -> SourceStatus:
        current = self._record()
        if update.expected_revision != current.revision:
            raise refuse(
                "malformed",
                f"expected_revision {update.expected_revision} is not the catalog revision "
                f"{current.revision}.",
            )
        base_url = update.base_url or current.base_url
        filename = update.document_filename or current.document_filename
        if base_url is None:
            raise refuse("source_invalid", "Initial catalog setup needs the catalog address.")
        FeedSource(base_url, label=LABEL).url(filename)
        trust = current.trust
        if update.trust is not None:
            trust = advance_trust(current.trust, parse_trust(update.trust), int(time.time()))
        if trust is None:
            raise refuse("source_invalid", "Initial catalog setup needs the discovery trust.")
        reference = current.credential_reference
        if update.token is not None:
            reference = secrets.token_hex(16)
            ensure_private_dir(self.directory / "credentials")
            atomic_write(self._token_path(reference), update.token.encode())
        elif update.clear_token:
            reference = None
        elif base_url != current.base_url and reference is not None:
            raise refuse(
                "source_invalid", "The catalog moved without its credential: supply it again."
            )
        record = msgspec.structs.replace(
            current,
            revision=current.revision + 1,
            base_url=base_url,
            document_filename=filename,
            trust=trust,
            credential_reference=reference,
        )
        self._save(record)
        return self._status(record)

    def read(self) -> CatalogReview:
        record = self._record()
        if record.base_url is None or record.trust is None:
            raise refuse(
                "source_invalid", "No catalog is configured: set one with configure_catalog."
            )
        source = FeedSource(record.base_url, self._token(record), label=LABEL)
        with FeedClient(source, self.tls) as client:
            catalog, floor, raw = read_catalog(
                client, record.document_filename, record.trust, record.floors
            )
        floors = {**record.floors, floor.publisher: floor}
        self._save(msgspec.structs.replace(self._record(), floors=floors))
        self._retain(catalog.catalog_sha256, raw)
        review = reviewed_catalog(catalog, self.host)
        return msgspec.structs.replace(review, window=list(CATALOG_WINDOW.accepted))

    def install(self, request: InstallFromCatalogRequest) -> CatalogInstalled:
        """Bind an installation's release source to one reviewed listing, then inspect
        its record through the ordinary path; it must be the record the listing names."""
        assert self.releases is not None and self.register is not None
        record = self._record()
        entry = self._listing(record, request)
        releases, store = self.releases, self.releases.store
        plugin_id = request.plugin_id
        if plugin_id is not None:
            if not store.exists(plugin_id):
                raise refuse("malformed", f"No installation {plugin_id} is registered.")
            floor = releases.source(plugin_id).release_floor
            if floor is not None and floor.bundle_id != entry.bundle_id:
                raise refuse(
                    "bundle_mismatch", f"{plugin_id} holds bundle {floor.bundle_id}, not this one."
                )
            if floor is not None and entry.sequence < floor.sequence:
                raise refuse("rollback", f"{plugin_id} already accepted sequence {floor.sequence}.")
        else:
            plugin_id = f"managed.{secrets.token_hex(6)}"
            self.register(plugin_id)
        source = releases.source(plugin_id)
        token: str | None = None
        clear = False
        catalog_token = self._token(record)
        if catalog_token is not None and _origin(entry.release_url) == _origin(
            record.base_url or ""
        ):
            token = catalog_token  # the catalog credential goes to its own origin only
        elif source.base_url != entry.release_url:
            clear = True  # another origin is read anonymously until given its own credential
        # (a credential the installation already holds for this exact feed is kept)
        assert record.trust is not None
        update = SourceUpdate(
            expected_revision=source.revision,
            base_url=entry.release_url,
            metadata_filename="release.json",
            trust=msgspec.to_builtins(record.trust),
            token=token,
            clear_token=clear and source.credential_reference is not None,
        )
        status = releases.configure(plugin_id, update)
        review = releases.inspect(plugin_id)
        named = (entry.release_digest, entry.publisher, entry.bundle_id, entry.sequence)
        served = (review.runtime_digest, review.publisher, review.bundle_id, review.sequence)
        if served != named:
            raise refuse(
                "digest_mismatch",
                "The record served at the listed feed is not the record the listing names.",
            )
        return CatalogInstalled(
            plugin_id=plugin_id, listing=listing(entry, fits=True), source=status, review=review
        )

    def _listing(self, record: CatalogRecord, request: InstallFromCatalogRequest) -> CatalogEntry:
        path = self.directory / "documents" / f"{request.catalog_sha256}.json"
        if record.trust is None or not path.is_file():
            raise refuse(
                "malformed", "This host no longer holds that listing: read the catalog again."
            )
        catalog = verify_catalog(path.read_bytes(), record.trust, int(time.time()))
        accepted = record.floors.get(catalog.claims.publisher)
        if accepted is None or accepted.catalog_sha256 != request.catalog_sha256:
            raise refuse(
                "rollback", "A later catalog read superseded that listing: read the catalog again."
            )
        entries = [
            e
            for e in catalog.claims.entries
            if e.bundle_id == request.bundle_id
            and e.sequence == request.sequence
            and request.runtime_platform in (None, e.runtime_platform)
        ]
        if not entries:
            raise refuse("malformed", "The catalog lists no such release for this host.")
        if len(entries) > 1:
            raise refuse(
                "malformed", "Two artifacts are listed at that sequence: name the runtime_platform."
            )
        if not matches_host(entries[0], self.host):
            raise refuse("platform_mismatch", "That listing does not fit this host.")
        return entries[0]

    def _token(self, record: CatalogRecord) -> str | None:
        if record.credential_reference is None:
            return None
        try:
            return self._token_path(record.credential_reference).read_text()
        except OSError:
            raise refuse(
                "source_invalid", "The stored catalog credential cannot be read."
            ) from None

    def _retain(self, digest: str, document: bytes) -> None:
        documents = self.directory / "documents"
        ensure_private_dir(documents)
        atomic_write(documents / f"{digest}.json", document)
        accepted = {floor.catalog_sha256 for floor in self._record().floors.values()}
        others = sorted(
            (p for p in documents.glob("*.json") if p.stem not in accepted),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for stale in others[RETAINED_DOCUMENTS:]:
            stale.unlink(missing_ok=True)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port
