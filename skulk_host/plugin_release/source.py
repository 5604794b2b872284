"""Inspecting and downloading a release from an installation's release directory.

Catalogs are read the same way (:func:`read_catalog`), and reading one fetches
nothing else. Metadata first, always: the record is fetched (bounded), verified against the
installation's trust, checked against this host and against the installation's
release floor (a rollback is refused here, before any transfer). Only a verified
release's signed wheels and bundle archive are then requested, each to its exact signed
size and SHA-256, all within one artifact deadline; files already cached and still
matching are not fetched again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from skulk_core.plugins.documents import HostFacts
from skulk_core.plugins.trust import PublisherTrust
from skulk_core.plugins.verify import (
    CatalogFloor,
    ReleaseFloor,
    VerifiedCatalog,
    VerifiedRelease,
    advance_catalog_floor,
    advance_release_floor,
    check_host,
    verify_catalog,
    verify_release,
)
from skulk_host.plugin_release.feed import ARTIFACT_DEADLINE_SECONDS, FeedClient
from skulk_host.plugin_service.bootstrap import file_sha256


def inspect_release(
    client: FeedClient,
    metadata_filename: str,
    trust: PublisherTrust,
    host: HostFacts,
    floor: ReleaseFloor | None,
    *,
    now: int | None = None,
) -> tuple[VerifiedRelease, ReleaseFloor]:
    """The verified release the directory serves now, and the floor accepting it."""
    raw = client.metadata(metadata_filename)
    release = verify_release(raw, trust, int(time.time()) if now is None else now)
    check_host(release.claims, host)
    return release, advance_release_floor(floor, release)


def read_catalog(
    client: FeedClient,
    document_filename: str,
    trust: PublisherTrust,
    floors: Mapping[str, CatalogFloor],
    *,
    now: int | None = None,
) -> tuple[VerifiedCatalog, CatalogFloor, bytes]:
    """The verified catalog the source serves now, and the floor accepting it (one
    floor per catalog publisher: an older revision, or another document at the
    accepted one, is a rollback). Reading a catalog selects, stages and installs
    nothing. The exact bytes come back too, for the host to retain."""
    raw = client.metadata(document_filename)
    catalog = verify_catalog(raw, trust, int(time.time()) if now is None else now)
    return catalog, advance_catalog_floor(floors.get(catalog.claims.publisher), catalog), raw


def _cached(path: Path, size: int, sha256: str) -> bool:
    if not path.is_file() or path.is_symlink() or path.stat().st_size != size:
        return False
    return file_sha256(path) == sha256


def download_release(client: FeedClient, release: VerifiedRelease, artifacts: Path) -> int:
    """Fetch every signed file of ``release`` (its wheels, then its archive) into
    ``artifacts``; returns bytes fetched."""
    deadline = time.monotonic() + ARTIFACT_DEADLINE_SECONDS
    fetched = 0
    for artifact in release.claims.runtime.artifacts:
        destination = artifacts / artifact.filename
        if _cached(destination, artifact.bytes, artifact.sha256):
            continue
        client.artifact(artifact, destination, deadline)
        fetched += artifact.bytes
    return fetched
