"""What an owner reviews before consenting: a verified release, a verified catalog.

Display values only, built from verified documents; no address, credential or
host-local path is in either. Field names are the spec's (snake_case). The shapes are
:mod:`skulk_core.plugins.answers`' Structs, which the manager answers as they are.
"""

from __future__ import annotations

from skulk_core.plugins.answers import CatalogListing, CatalogReview, ReleaseReview
from skulk_core.plugins.documents import CatalogEntry, CatalogListingFields, HostFacts
from skulk_core.plugins.verify import VerifiedCatalog, VerifiedRelease, matches_host


def reviewed_release(release: VerifiedRelease, source_revision: int) -> ReleaseReview:
    claims = release.claims
    return ReleaseReview(
        runtime_digest=release.runtime_digest,
        source_revision=source_revision,
        publisher=claims.publisher,
        bundle_id=claims.bundle_id,
        version=claims.version,
        sequence=claims.sequence,
        platform=claims.platform,
        python_requires=claims.runtime.python_requires,
        skulk_build_sha256=claims.skulk_build_sha256,
        permissions=list(claims.permissions),
        artifact_bytes=claims.artifact_bytes,
        expires_at=claims.expires_at,
    )


def listing(entry: CatalogEntry, fits: bool) -> CatalogListing:
    """``entry`` without its address (no addresses in a review), and whether it fits."""
    shown = {name: getattr(entry, name) for name in CatalogListingFields.__struct_fields__}
    return CatalogListing(**shown, matches_host=fits)


def reviewed_catalog(catalog: VerifiedCatalog, host: HostFacts) -> CatalogReview:
    claims = catalog.claims
    return CatalogReview(
        publisher=claims.publisher,
        revision=claims.revision,
        created_at=claims.created_at,
        expires_at=claims.expires_at,
        catalog_sha256=catalog.catalog_sha256,
        entries=[listing(entry, matches_host(entry, host)) for entry in claims.entries],
    )
