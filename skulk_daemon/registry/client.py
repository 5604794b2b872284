"""The registry client: a python-tuf ``Updater`` over ``registry.url``, its verified
catalog cached on disk, and the facts ``GET /v1/registry/status`` reports.

Trust starts from ``registry.root`` (a root.json path), else
``<data dir>/registry/root.json``. Each (URL, initial root) pair keeps its own TUF
metadata under ``<data dir>/registry/<key>/``, so the versions trusted here (what
refuses rollback) survive restarts, and pointing the node at another repository starts
from that repository's root rather than from another's state.

A refresh that python-tuf refuses (freeze, rollback, tampering, an unreachable
repository) or whose catalog target Skulk refuses never replaces the verified catalog;
that one is used for up to :data:`MAX_CACHE_AGE_SECONDS` after its last successful
refresh, then dropped (installed and custom cards remain). ``SKULK_OFFLINE=true`` skips
the network and the registry catalog altogether.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.config import RegistryConfig
from skulk_core.registry.format import (
    CATALOG_TARGET,
    MAX_CATALOG_BYTES,
    CatalogRejectedError,
    VerifiedCatalog,
    parse_catalog,
)
from skulk_daemon.registry.refusals import RefusalReason, classify
from skulk_host.fsutil import atomic_write, ensure_private_dir

log = logging.getLogger(__name__)

REFRESH_INTERVAL_SECONDS: Final = 60
MAX_CACHE_AGE_SECONDS: Final = 30 * 24 * 3600
OFFLINE_ENV: Final = "SKULK_OFFLINE"
FETCH_TIMEOUT_SECONDS: Final = 5
CACHE_FILE: Final = "verified-catalog.json"
MAX_METADATA_BYTES: Final = 4 * 1024 * 1024


class RegistryState(StrEnum):
    UNCONFIGURED = "unconfigured"
    OFFLINE = "offline"
    NEVER_VERIFIED = "never_verified"
    CURRENT = "current"
    """The last refresh verified the catalog in use."""
    CACHED = "cached"
    """The last refresh failed; the previously verified catalog is still in use."""
    EXPIRED = "expired"
    """The last verified catalog is older than the outage limit and is not used."""


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    reason: RefusalReason
    message: str
    at: str


class RegistryStatus(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/registry/status``."""

    state: RegistryState
    source_url: str | None
    trusted_root: str | None
    offline: bool
    snapshot_id: str | None
    card_count: int
    advisory_count: int
    last_attempt_at: str | None
    last_success_at: str | None
    verified_age_seconds: float | None
    max_cache_age_seconds: int = MAX_CACHE_AGE_SECONDS
    refresh_interval_seconds: int = REFRESH_INTERVAL_SECONDS
    last_refusal: Refusal | None = None


class _Cached(msgspec.Struct, frozen=True, kw_only=True):
    """The on-disk record of the last verified catalog."""

    source_url: str
    verified_at: float
    catalog: str


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


class RegistryClient:
    """Refreshes one node's view of the signed registry; thread-safe reads."""

    def __init__(
        self,
        config: Callable[[], RegistryConfig],
        data_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self._config = config
        self._home = data_dir / "registry"
        self._clock = clock
        self._environ = environ
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()
        self._key: str | None = None
        self._marker: tuple[object, ...] | None = None
        self._marked_key: str | None = None
        self._catalog: VerifiedCatalog | None = None
        self._verified_at: float | None = None
        self._last_attempt: float | None = None
        self._last_ok = False
        self._refusal: Refusal | None = None

    # -- reads -------------------------------------------------------------------

    @property
    def offline(self) -> bool:
        return self._environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")

    def root_path(self) -> Path:
        configured = self._config().root
        return Path(configured).expanduser() if configured else self._home / "root.json"

    def current(self) -> VerifiedCatalog | None:
        """The verified catalog to merge now, if one is usable."""
        if self.offline or self._config().url is None:
            return None
        self._load_cache()
        with self._lock:
            if self._catalog is None or self._verified_at is None:
                return None
            if self._clock() - self._verified_at > MAX_CACHE_AGE_SECONDS:
                return None
            return self._catalog

    def status(self) -> RegistryStatus:
        url = self._config().url
        offline = self.offline
        if url is not None and not offline:
            self._load_cache()
        with self._lock:
            catalog, verified_at = self._catalog, self._verified_at
            age = None if verified_at is None else max(0.0, self._clock() - verified_at)
            usable = age is not None and age <= MAX_CACHE_AGE_SECONDS
            if url is None:
                state = RegistryState.UNCONFIGURED
            elif offline:
                state = RegistryState.OFFLINE
            elif catalog is None:
                state = RegistryState.NEVER_VERIFIED
            elif not usable:
                state = RegistryState.EXPIRED
            elif self._last_ok:
                state = RegistryState.CURRENT
            else:
                state = RegistryState.CACHED
            shown = catalog if usable and url is not None and not offline else None
            return RegistryStatus(
                state=state,
                source_url=url,
                trusted_root=None if url is None else str(self.root_path()),
                offline=offline,
                snapshot_id=None if shown is None else shown.snapshot_id,
                card_count=0 if shown is None else len(shown.cards),
                advisory_count=0 if shown is None else len(shown.advisories),
                last_attempt_at=_iso(self._last_attempt),
                last_success_at=_iso(verified_at),
                verified_age_seconds=None if age is None else round(age, 3),
                last_refusal=self._refusal,
            )

    # -- the refresh --------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh now, then every :data:`REFRESH_INTERVAL_SECONDS`, until ``stop``."""
        while not stop.is_set():
            if self._config().url is not None and not self.offline:
                await asyncio.to_thread(self.refresh)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REFRESH_INTERVAL_SECONDS)

    def refresh(self) -> RefusalReason | None:
        """One refresh attempt (blocking; the loop runs it in a thread). Answers the
        refusal reason, or ``None`` when a catalog was verified. Never raises."""
        config = self._config()
        if config.url is None or self.offline:
            return None
        with self._refreshing:
            self._load_cache()
            started = self._clock()
            try:
                raw = self._fetch(config.url)
                catalog = parse_catalog(raw)
            except CatalogRejectedError as exc:
                return self._refused(started, RefusalReason.INVALID_CATALOG, str(exc))
            except _NoRoot as exc:
                return self._refused(started, RefusalReason.NO_TRUSTED_ROOT, str(exc))
            except Exception as exc:
                reason, message = classify(exc)
                return self._refused(started, reason, message)
            self._verified(started, config.url, raw, catalog)
            return None

    def _fetch(self, url: str) -> bytes:
        directory = self._repository_dir(url)
        metadata_dir = directory / "metadata"
        targets_dir = directory / "targets"
        for path in (self._home, directory, metadata_dir, targets_dir):
            ensure_private_dir(path)
        trusted = metadata_dir / "root.json"
        bootstrap = None if trusted.exists() else self._root_bytes()
        base = url.rstrip("/")
        # NOTE: python-tuf loads when a registry is first read, not when the daemon
        # starts (issue 43: it was ~2 % of the daemon's import time).
        from tuf.ngclient.config import UpdaterConfig  # noqa: PLC0415
        from tuf.ngclient.updater import Updater  # noqa: PLC0415
        from tuf.ngclient.urllib3_fetcher import Urllib3Fetcher  # noqa: PLC0415

        updater = Updater(
            metadata_dir=str(metadata_dir),
            metadata_base_url=f"{base}/metadata/",
            target_dir=str(targets_dir),
            target_base_url=f"{base}/targets/",
            fetcher=Urllib3Fetcher(socket_timeout=FETCH_TIMEOUT_SECONDS, app_user_agent="skulk"),
            config=UpdaterConfig(
                timestamp_max_length=MAX_METADATA_BYTES,
                snapshot_max_length=MAX_METADATA_BYTES,
                targets_max_length=MAX_METADATA_BYTES,
            ),
            bootstrap=bootstrap,
        )
        updater.refresh()
        info = updater.get_targetinfo(CATALOG_TARGET)
        if info is None:
            raise CatalogRejectedError(f"the repository publishes no {CATALOG_TARGET} target")
        if info.length > MAX_CATALOG_BYTES:
            raise CatalogRejectedError(
                f"the signed {CATALOG_TARGET} is {info.length} bytes; at most "
                f"{MAX_CATALOG_BYTES} are accepted"
            )
        cached = updater.find_cached_target(info)
        return Path(cached or updater.download_target(info)).read_bytes()

    def _root_bytes(self) -> bytes:
        path = self.root_path()
        try:
            return path.read_bytes()
        except OSError:
            raise _NoRoot(
                f"registry.url is set but the trusted root {path} cannot be read; copy the "
                "repository's root.json there or set registry.root"
            ) from None

    def _repository_dir(self, url: str) -> Path:
        key = self._cache_key(url)
        return self._home / key

    def _cache_key(self, url: str) -> str:
        """Names the (URL, initial root) pair; the root is hashed again only when its
        file changes (this runs on every catalog read)."""
        path = self.root_path()
        try:
            stat = path.stat()
            marker: tuple[object, ...] = (url, str(path), stat.st_mtime_ns, stat.st_size)
        except OSError:
            marker = (url, str(path))
        if marker == self._marker and self._marked_key is not None:
            return self._marked_key
        try:
            root_digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            root_digest = "none"
        key = hashlib.sha256(f"{url.rstrip('/')}\n{root_digest}".encode()).hexdigest()[:16]
        self._marker, self._marked_key = marker, key
        return key

    def _refused(self, at: float, reason: RefusalReason, message: str) -> RefusalReason:
        refusal = Refusal(reason=reason, message=message, at=_iso(at) or "")
        with self._lock:
            repeated = self._refusal is not None and (
                self._refusal.reason,
                self._refusal.message,
            ) == (reason, message)
            self._refusal = refusal
            self._last_attempt = at
            self._last_ok = False
            kept = self._catalog is not None
        level = logging.DEBUG if repeated else logging.WARNING
        log.log(
            level,
            "registry refresh refused (%s): %s; %s",
            reason.value,
            message,
            "keeping the last verified catalog while it is under 30 days old"
            if kept
            else "no verified catalog: the catalog is the installed and custom cards",
        )
        return reason

    def _verified(self, at: float, url: str, raw: bytes, catalog: VerifiedCatalog) -> None:
        with self._lock:
            changed = self._catalog is None or self._catalog.snapshot_id != catalog.snapshot_id
            self._catalog, self._verified_at = catalog, at
            self._last_attempt, self._last_ok = at, True
        record = _Cached(source_url=url, verified_at=at, catalog=raw.decode("utf-8"))
        atomic_write(self._repository_dir(url) / CACHE_FILE, msgspec.json.encode(record))
        if changed:
            log.info(
                "registry catalog verified: snapshot %s, %d card(s)",
                catalog.snapshot_id,
                len(catalog.cards),
            )

    def _load_cache(self) -> None:
        """Read the on-disk verified catalog once per repository (after a restart)."""
        url = self._config().url
        if url is None:
            return
        key = self._cache_key(url)
        if key == self._key:
            return
        with self._lock:
            self._key = key
            self._catalog = self._verified_at = None
            self._last_attempt, self._last_ok, self._refusal = None, False, None
        path = self._home / key / CACHE_FILE
        try:
            record = msgspec.json.decode(path.read_bytes(), type=_Cached)
            catalog = parse_catalog(record.catalog.encode("utf-8"))
        except FileNotFoundError:
            return
        except (OSError, msgspec.DecodeError, CatalogRejectedError) as exc:
            log.warning("ignoring the cached registry catalog %s: %s", path, exc)
            return
        with self._lock:
            if self._key == key:
                self._catalog, self._verified_at = catalog, record.verified_at


class _NoRoot(Exception):
    """No trusted root to start from."""
