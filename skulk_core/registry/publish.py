"""Building a signed TUF repository for a catalog: pure (bytes in, bytes out).

:func:`build_repository` answers every file a repository serves, by path relative to
its root; the caller writes them (``skulk registry publish`` does, temp + rename). The
layout is the one the daemon's client reads: ``metadata/`` (``1.root.json``,
``root.json``, ``N.targets.json``, ``N.snapshot.json``, ``timestamp.json``; consistent
snapshots) and ``targets/<sha256>.catalog.json``. One ed25519 key signs each role.

Only ``tuf.api`` (metadata, no network) and ``securesystemslib`` signers are used, so
this stays importable by the CLI without the daemon. Key generation draws randomness
(as ``skulk_core.ids`` does); everything else is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

# NOTE: both packages re-export these names without ``__all__``; the ignores are for
# mypy's implicit re-export check only (the names are their documented public API).
from securesystemslib.signer import CryptoSigner, Signer  # type: ignore[attr-defined]
from tuf.api.metadata import (  # type: ignore[attr-defined]
    Metadata,
    MetaFile,
    Root,
    Snapshot,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization.json import JSONSerializer

from skulk_core.registry.format import CATALOG_TARGET

ROLES: Final = ("root", "targets", "snapshot", "timestamp")
SPEC_VERSION: Final = "1.0.31"


class PublishError(ValueError):
    """The repository cannot be built as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class RoleKeys:
    """One signer per top-level role."""

    root: Signer
    targets: Signer
    snapshot: Signer
    timestamp: Signer

    def of(self, role: str) -> Signer:
        signer: Signer = getattr(self, role)
        return signer


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """How long each role's metadata stays valid after ``now`` (negative: already
    expired, which is how tests publish a frozen repository)."""

    root: timedelta = timedelta(days=365)
    targets: timedelta = timedelta(days=90)
    snapshot: timedelta = timedelta(days=7)
    timestamp: timedelta = timedelta(days=1)


def generate_keys() -> tuple[RoleKeys, dict[str, bytes]]:
    """Fresh ed25519 keys, and their private halves as unencrypted PKCS#8 PEM by role."""
    pems = {role: CryptoSigner.generate_ed25519().private_bytes for role in ROLES}
    return load_keys(pems), pems


def load_keys(pems: dict[str, bytes]) -> RoleKeys:
    """Signers from PEM private keys by role name."""
    missing = [role for role in ROLES if role not in pems]
    if missing:
        raise PublishError(f"no private key for role(s) {', '.join(missing)}")
    signers = {}
    for role in ROLES:
        try:
            key = load_pem_private_key(pems[role], password=None)
        except (ValueError, TypeError) as exc:
            raise PublishError(f"the {role} key is not an unencrypted PEM private key") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise PublishError(f"the {role} key is not an ed25519 key")
        signers[role] = CryptoSigner(key)
    return RoleKeys(**signers)


def build_root(keys: RoleKeys, *, now: datetime, lifetime: timedelta) -> bytes:
    """A version-1 root trusting ``keys`` (threshold 1 per role)."""
    root = Root(
        version=1,
        spec_version=SPEC_VERSION,
        expires=_expiry(now, lifetime),
        consistent_snapshot=True,
    )
    for role in ROLES:
        root.add_key(keys.of(role).public_key, role)
    return _signed(Metadata(root), keys.root)


def check_root(root: bytes, keys: RoleKeys) -> int:
    """The root's version, after checking it trusts exactly ``keys``' public halves."""
    try:
        metadata = Metadata[Root].from_bytes(root)
    except Exception as exc:
        raise PublishError(f"the repository's root.json is unreadable: {exc}") from None
    signed = metadata.signed
    for role in ROLES:
        trusted = set(signed.roles[role].keyids)
        if keys.of(role).public_key.keyid not in trusted:
            raise PublishError(
                f"the {role} key does not match the repository's root.json; publishing with "
                "other keys would need a root rotation"
            )
    return signed.version


def build_repository(
    catalog: bytes,
    keys: RoleKeys,
    *,
    version: int,
    now: datetime,
    root: bytes | None = None,
    lifetimes: Lifetimes = Lifetimes(),
    snapshot_version: int | None = None,
    targets_version: int | None = None,
) -> dict[str, bytes]:
    """Every file of a repository serving ``catalog``, by relative path.

    ``version`` numbers the new targets, snapshot and timestamp metadata (publish with a
    higher one each time; clients refuse a lower one). ``root`` is the existing root's
    bytes (a fresh version-1 root is made when ``None``). ``snapshot_version`` and
    ``targets_version`` override what the timestamp and snapshot point at (tests
    publish rollbacks with them).
    """
    if version < 1:
        raise PublishError("metadata versions start at 1")
    root_bytes = root if root is not None else build_root(keys, now=now, lifetime=lifetimes.root)
    root_version = check_root(root_bytes, keys)
    targets_v = targets_version or version
    snapshot_v = snapshot_version or version
    target = TargetFile.from_data(CATALOG_TARGET, catalog, ["sha256"])
    targets = Targets(
        version=targets_v,
        spec_version=SPEC_VERSION,
        expires=_expiry(now, lifetimes.targets),
        targets={CATALOG_TARGET: target},
    )
    snapshot = Snapshot(
        version=snapshot_v,
        spec_version=SPEC_VERSION,
        expires=_expiry(now, lifetimes.snapshot),
        meta={"targets.json": MetaFile(version=targets_v)},
    )
    timestamp = Timestamp(
        version=version,
        spec_version=SPEC_VERSION,
        expires=_expiry(now, lifetimes.timestamp),
        snapshot_meta=MetaFile(version=snapshot_v),
    )
    digest = target.hashes["sha256"]
    return {
        f"metadata/{root_version}.root.json": root_bytes,
        "metadata/root.json": root_bytes,
        f"metadata/{targets_v}.targets.json": _signed(Metadata(targets), keys.targets),
        f"metadata/{snapshot_v}.snapshot.json": _signed(Metadata(snapshot), keys.snapshot),
        "metadata/timestamp.json": _signed(Metadata(timestamp), keys.timestamp),
        f"targets/{digest}.{CATALOG_TARGET}": catalog,
    }


def published_version(timestamp: bytes) -> int:
    """The version of a repository's current ``timestamp.json``."""
    try:
        return Metadata[Timestamp].from_bytes(timestamp).signed.version
    except Exception as exc:
        raise PublishError(f"the repository's timestamp.json is unreadable: {exc}") from None


def _expiry(now: datetime, lifetime: timedelta) -> datetime:
    return (now.astimezone(UTC) + lifetime).replace(microsecond=0)


def _signed(metadata: Metadata[Any], signer: Signer) -> bytes:
    metadata.sign(signer)
    return metadata.to_bytes(JSONSerializer(compact=False))
