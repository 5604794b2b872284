"""Verifying signed releases and catalogs, and the decisions that follow from them.

Order matters and is fixed: the size bound before parsing; the envelope; the
publisher's key from the host's own trust (unknown or revoked publishers refused);
the Ed25519 signature over the canonical bytes of exactly what was parsed; then the
protocol window (so a verified release from another protocol gets the named
``release_protocol_unsupported`` answer, not "malformed"); then the strict claims,
validity period and revocations. Nothing here does I/O: bytes, trust and the time
come in, a verified value or a typed refusal goes out.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, TypeVar

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from skulk_core.plugins.canonical import NotCanonical, canonical_json
from skulk_core.plugins.documents import (
    CATALOG_WINDOW,
    MAX_METADATA_BYTES,
    RELEASE_WINDOW,
    RUNTIME_WINDOW,
    CatalogClaims,
    CatalogEntry,
    Envelope,
    HostFacts,
    ProtocolWindow,
    ReleaseClaims,
)
from skulk_core.plugins.errors import PluginRefusal, ReleaseProtocolUnsupported, refuse
from skulk_core.plugins.trust import PublisherTrust, check_current, check_not_revoked, publisher_key

T = TypeVar("T")

_ENVELOPE: Final = msgspec.json.Decoder(Envelope)


class VerifiedRelease(msgspec.Struct, frozen=True, kw_only=True):
    claims: ReleaseClaims
    runtime_digest: str
    """SHA-256 of the canonical signed claims: the release's exact identity."""


class VerifiedCatalog(msgspec.Struct, frozen=True, kw_only=True):
    claims: CatalogClaims
    catalog_sha256: str


class ReleaseFloor(msgspec.Struct, frozen=True, kw_only=True):
    """The highest release an installation has accepted: nothing below it installs."""

    bundle_id: str
    sequence: int
    runtime_digest: str


class CatalogFloor(msgspec.Struct, frozen=True, kw_only=True):
    """The newest catalog a host has accepted from its source."""

    publisher: str
    revision: int
    catalog_sha256: str


def signing_bytes(signed: dict[str, Any]) -> bytes:
    """What a publisher signs: the canonical JSON of the ``signed`` object."""
    return canonical_json(signed)


def _open(raw: bytes, trust: PublisherTrust, noun: str) -> tuple[dict[str, Any], str, bytes]:
    if len(raw) > MAX_METADATA_BYTES:
        raise refuse("too_large", f"The {noun} is larger than {MAX_METADATA_BYTES} bytes.")
    try:
        envelope = _ENVELOPE.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise refuse(
            "malformed", f"The address returned something other than a signed {noun}."
        ) from None
    publisher = envelope.signed.get("publisher")
    if not isinstance(publisher, str):
        raise refuse("malformed", f"The signed {noun} names no publisher.")
    key = publisher_key(trust, publisher)
    try:
        message = signing_bytes(envelope.signed)
    except NotCanonical as exc:
        raise refuse("malformed", f"The signed {noun} is not canonical JSON ({exc}).") from None
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(bytes.fromhex(envelope.signature), message)
    except (InvalidSignature, ValueError):
        raise refuse(
            "signature_mismatch",
            f"The {noun} signature does not match publisher {publisher}'s trusted key.",
        ) from None
    return envelope.signed, hashlib.sha256(message).hexdigest(), key


def _protocol(value: object, noun: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse("malformed", f"The signed {noun} carries no protocol number.")
    return value


def _claims(signed: dict[str, Any], kind: type[T], noun: str) -> T:
    try:
        return msgspec.convert(signed, kind)
    except msgspec.ValidationError as exc:
        raise refuse("malformed", f"The signed {noun} is not valid: {exc}.") from None


def _check_period(created_at: int, expires_at: int, now: int, noun: str) -> None:
    if now >= expires_at:
        raise refuse(
            "document_expired",
            f"The {noun} is outside its validity period, or the host clock is wrong.",
        )
    if created_at > now + CLOCK_SKEW_SECONDS:
        raise refuse(
            "not_yet_valid",
            f"The {noun} is outside its validity period, or the host clock is wrong.",
        )


CLOCK_SKEW_SECONDS: Final = 300
"""A document created this far in the host's future is still accepted."""


def verify_release(
    raw: bytes,
    trust: PublisherTrust,
    now: int,
    *,
    release_window: ProtocolWindow = RELEASE_WINDOW,
    runtime_window: ProtocolWindow = RUNTIME_WINDOW,
) -> VerifiedRelease:
    """Verify a served release record against the installation's trust."""
    check_current(trust, now)
    signed, digest, _ = _open(raw, trust, "release")
    offered = _protocol(signed.get("protocol"), "release")
    if offered not in release_window.accepted:
        raise ReleaseProtocolUnsupported("release", offered, release_window.accepted)
    runtime = signed.get("runtime")
    offered_runtime = _protocol(
        runtime.get("protocol") if isinstance(runtime, dict) else None, "runtime"
    )
    if offered_runtime not in runtime_window.accepted:
        raise ReleaseProtocolUnsupported("runtime", offered_runtime, runtime_window.accepted)
    claims = _claims(signed, ReleaseClaims, "release")
    _check_period(claims.created_at, claims.expires_at, now, "release")
    check_not_revoked(trust, digest, *(artifact.sha256 for artifact in claims.runtime.artifacts))
    return VerifiedRelease(claims=claims, runtime_digest=digest)


def verify_catalog(
    raw: bytes, trust: PublisherTrust, now: int, *, window: ProtocolWindow = CATALOG_WINDOW
) -> VerifiedCatalog:
    """Verify a served catalog against the host's discovery trust. Entries the trust
    revokes (their record, claims or executable artifact) are left out."""
    check_current(trust, now)
    signed, digest, _ = _open(raw, trust, "catalog")
    offered = _protocol(signed.get("protocol"), "catalog")
    if offered not in window.accepted:
        accepted = " and ".join(str(n) for n in window.accepted)
        raise refuse(
            "protocol_unsupported",
            f"This host accepts catalog protocol {accepted}, but this catalog offers protocol "
            f"{offered}: update Skulk on this host, or ask the publisher for a catalog "
            "published for it.",
        )
    claims = _claims(signed, CatalogClaims, "catalog")
    _check_period(claims.created_at, claims.expires_at, now, "catalog")
    listed = tuple(entry for entry in claims.entries if not _revoked(trust, entry))
    claims = msgspec.structs.replace(claims, entries=listed)
    return VerifiedCatalog(claims=claims, catalog_sha256=digest)


def _revoked(trust: PublisherTrust, entry: CatalogEntry) -> bool:
    try:
        check_not_revoked(trust, entry.release_digest, entry.artifact_sha256)
    except PluginRefusal:
        return True
    return entry.publisher in trust.revoked_publishers


def check_host(claims: ReleaseClaims, host: HostFacts) -> None:
    """Refuse a release this host cannot run: platform, Python, qualified build."""
    if claims.platform not in ("any", host.artifact_family):
        raise refuse(
            "platform_mismatch",
            f"This release is built for {claims.platform}; this host is {host.artifact_family}.",
        )
    try:
        fits = SpecifierSet(claims.runtime.python_requires).contains(
            Version(host.python_version), prereleases=True
        )
    except (InvalidSpecifier, InvalidVersion):
        raise refuse("malformed", "The release's python_requires cannot be read.") from None
    if not fits:
        raise refuse(
            "python_mismatch",
            f"This release needs Python {claims.runtime.python_requires}; this host runs "
            f"{host.python_version}.",
        )
    if (
        claims.skulk_build_sha256 is not None
        and claims.skulk_build_sha256 != host.skulk_build_sha256
    ):
        raise refuse(
            "build_mismatch",
            "This release is qualified for another Skulk build: choose a release published "
            "for this host's build.",
        )


def matches_host(entry: CatalogEntry, host: HostFacts) -> bool:
    """Whether a catalog listing fits this host (display only; install verifies again)."""
    platform_fits = entry.runtime_platform in (None, "any", host.artifact_family) and (
        not entry.platforms or host.artifact_family in entry.platforms or "any" in entry.platforms
    )
    build_fits = entry.skulk_build_sha256 in (None, host.skulk_build_sha256)
    return platform_fits and build_fits


def advance_release_floor(floor: ReleaseFloor | None, release: VerifiedRelease) -> ReleaseFloor:
    """The floor after accepting ``release``; refuses another bundle, a lower sequence
    (a rollback: explicit lifecycle rollback is a separate operation) and a second
    record at the same sequence."""
    claims = release.claims
    if floor is None:
        return ReleaseFloor(
            bundle_id=claims.bundle_id,
            sequence=claims.sequence,
            runtime_digest=release.runtime_digest,
        )
    if claims.bundle_id != floor.bundle_id:
        raise refuse(
            "bundle_mismatch",
            f"This installation holds bundle {floor.bundle_id}; the source now offers "
            f"{claims.bundle_id}.",
        )
    if claims.sequence < floor.sequence:
        raise refuse(
            "rollback",
            f"Release sequence {claims.sequence} is older than the accepted sequence "
            f"{floor.sequence}: a rollback is refused before any transfer.",
        )
    if claims.sequence == floor.sequence:
        if release.runtime_digest != floor.runtime_digest:
            raise refuse(
                "equivocation",
                f"The source offers a different release at the accepted sequence "
                f"{floor.sequence}: refused as a rollback.",
            )
        return floor
    return ReleaseFloor(
        bundle_id=claims.bundle_id, sequence=claims.sequence, runtime_digest=release.runtime_digest
    )


def advance_catalog_floor(floor: CatalogFloor | None, catalog: VerifiedCatalog) -> CatalogFloor:
    """The accepted catalog revision only moves forward (the caller keeps one floor per
    catalog publisher): an older revision, or another document at the accepted
    revision, is a rollback."""
    claims = catalog.claims
    new = CatalogFloor(
        publisher=claims.publisher, revision=claims.revision, catalog_sha256=catalog.catalog_sha256
    )
    if floor is None or floor.publisher != claims.publisher:
        return new
    if claims.revision < floor.revision or (
        claims.revision == floor.revision and catalog.catalog_sha256 != floor.catalog_sha256
    ):
        raise refuse(
            "rollback",
            "The catalog is older than the one the host already accepted: read it again once "
            "the publisher serves a newer revision.",
        )
    return new if claims.revision > floor.revision else floor
