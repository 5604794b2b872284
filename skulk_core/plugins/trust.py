"""Publisher trust: which Ed25519 keys may sign releases (or catalogs) for this host.

Trust comes from the owner's protected local storage, never from a release. A trust
document has a monotonic ``revision``, a Unix ``expires_at``, ``publishers`` (publisher
id to the hex of its raw 32-byte Ed25519 public key) and the two revocation lists.
:func:`advance_trust` is the only way a held trust changes: the new document must be
unexpired and strictly newer, and every revocation ever held is carried into it, so a
revocation can never be removed (not by omission, not by a restored older file).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from skulk_core.plugins.canonical import canonical_sha256
from skulk_core.plugins.errors import refuse

MAX_TRUST_BYTES: Final = 128 * 1024
MAX_PUBLISHERS: Final = 64
MAX_REVOCATIONS: Final = 1024
PUBLISHER_ID_PATTERN: Final = "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"

PublisherId = Annotated[str, msgspec.Meta(pattern=PUBLISHER_ID_PATTERN)]
PublicKeyHex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
Sha256Hex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class PublisherTrust(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    revision: Annotated[int, msgspec.Meta(ge=1)]
    expires_at: Annotated[int, msgspec.Meta(ge=0)]
    publishers: Annotated[dict[PublisherId, PublicKeyHex], msgspec.Meta(max_length=MAX_PUBLISHERS)]
    revoked_publishers: Annotated[
        tuple[PublisherId, ...], msgspec.Meta(max_length=MAX_REVOCATIONS)
    ] = ()
    revoked_artifacts: Annotated[
        tuple[Sha256Hex, ...], msgspec.Meta(max_length=MAX_REVOCATIONS)
    ] = ()
    """SHA-256 digests of release records, signed claims or artifact files."""

    def digest(self) -> str:
        return canonical_sha256(msgspec.to_builtins(self))


_DECODER: Final = msgspec.json.Decoder(PublisherTrust)


def parse_trust(raw: bytes | object) -> PublisherTrust:
    """A trust document from its JSON bytes (or already-decoded JSON values)."""
    try:
        if isinstance(raw, bytes | bytearray):
            if len(raw) > MAX_TRUST_BYTES:
                raise refuse("too_large", f"A trust document is at most {MAX_TRUST_BYTES} bytes.")
            return _DECODER.decode(raw)
        return msgspec.convert(raw, PublisherTrust)
    except msgspec.ValidationError as exc:
        raise refuse("malformed", f"The trust document is not valid: {exc}.") from None
    except msgspec.DecodeError:
        raise refuse("malformed", "The trust document is not valid JSON.") from None


def check_current(trust: PublisherTrust, now: int) -> None:
    """Refuse a trust document past its expiry."""
    if now >= trust.expires_at:
        raise refuse(
            "trust_expired",
            "The publisher trust has expired: provision a newer trust revision.",
        )


def advance_trust(
    held: PublisherTrust | None, proposed: PublisherTrust, now: int
) -> PublisherTrust:
    """The trust to hold after ``proposed`` is offered: newer, unexpired, and carrying
    every revocation ``held`` had. An identical resubmission changes nothing."""
    check_current(proposed, now)
    if held is None:
        return _normalized(proposed)
    if proposed.revision == held.revision:
        if _normalized(proposed).digest() == held.digest():
            return held
        raise refuse(
            "trust_not_newer",
            f"Trust revision {proposed.revision} is already held with other contents: "
            "a change needs a higher revision.",
        )
    if proposed.revision < held.revision:
        raise refuse(
            "trust_not_newer",
            f"Trust revision {proposed.revision} is older than the held revision "
            f"{held.revision}: a restored older trust is refused.",
        )
    merged = msgspec.structs.replace(
        proposed,
        revoked_publishers=(*held.revoked_publishers, *proposed.revoked_publishers),
        revoked_artifacts=(*held.revoked_artifacts, *proposed.revoked_artifacts),
    )
    return _normalized(merged)


def _normalized(trust: PublisherTrust) -> PublisherTrust:
    """Revocations deduplicated and sorted, so equal trust has equal bytes."""
    return msgspec.structs.replace(
        trust,
        revoked_publishers=tuple(sorted(set(trust.revoked_publishers))),
        revoked_artifacts=tuple(sorted(set(trust.revoked_artifacts))),
    )


def publisher_key(trust: PublisherTrust, publisher: str) -> bytes:
    """The raw public key ``trust`` holds for ``publisher``; refuses revoked or unknown."""
    if publisher in trust.revoked_publishers:
        raise refuse(
            "publisher_revoked",
            f"Publisher {publisher} is revoked by the trust this host holds.",
        )
    key = trust.publishers.get(publisher)
    if key is None:
        raise refuse(
            "publisher_untrusted",
            f"Publisher {publisher} is not in the trust this host holds.",
        )
    return bytes.fromhex(key)


def check_not_revoked(trust: PublisherTrust, *digests: str) -> None:
    """Refuse when any of ``digests`` (record, claims, artifacts) is revoked."""
    revoked = set(trust.revoked_artifacts)
    if any(digest in revoked for digest in digests):
        raise refuse("artifact_revoked", "The trust this host holds revokes this release.")
