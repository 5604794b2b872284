"""What an owner reviews before consenting: a verified release, a verified catalog.

Display values only, built from verified documents; no address, credential or
host-local path is in either. Field names are the spec's (snake_case).
"""

from __future__ import annotations

from typing import Any

import msgspec

from skulk_core.plugins.documents import HostFacts
from skulk_core.plugins.verify import VerifiedCatalog, VerifiedRelease, matches_host


def release_review(release: VerifiedRelease, source_revision: int) -> dict[str, Any]:
    claims = release.claims
    return {
        "runtime_digest": release.runtime_digest,
        "source_revision": source_revision,
        "publisher": claims.publisher,
        "bundle_id": claims.bundle_id,
        "version": claims.version,
        "sequence": claims.sequence,
        "platform": claims.platform,
        "python_requires": claims.runtime.python_requires,
        "skulk_build_sha256": claims.skulk_build_sha256,
        "permissions": list(claims.permissions),
        "artifact_bytes": claims.artifact_bytes,
        "expires_at": claims.expires_at,
    }


def catalog_review(catalog: VerifiedCatalog, host: HostFacts) -> dict[str, Any]:
    claims = catalog.claims
    entries = []
    for entry in claims.entries:
        listed = msgspec.to_builtins(entry)
        del listed["release_url"]  # no addresses in a review
        entries.append({**listed, "matches_host": matches_host(entry, host)})
    return {
        "publisher": claims.publisher,
        "revision": claims.revision,
        "created_at": claims.created_at,
        "expires_at": claims.expires_at,
        "catalog_sha256": catalog.catalog_sha256,
        "entries": entries,
    }
