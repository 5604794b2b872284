"""Signed plugin documents: release records and catalogs, their bounds and windows.

Both are served as one JSON envelope ``{"signed": {...}, "signature": "<hex>"}``: the
signature is Ed25519 by the publisher named in ``signed.publisher`` over
:func:`~skulk_core.plugins.canonical.canonical_json` of ``signed``, and the document's
digest (a release's ``runtime_digest``, a catalog's ``catalog_sha256``) is the SHA-256
of those same canonical bytes. A document is at most :data:`MAX_METADATA_BYTES`.

A release (``type: "skulk.release"``) names its bundle identity, a monotonic
``sequence``, the artifact ``platform`` (``"any"`` or one artifact family such as
``linux-glibc-x86_64``), the qualified Skulk build, the permissions it asks for, an
expiry, and its ``runtime``: the exact wheels (file name, SHA-256, size) staged into
the installation's own virtual environment, the optional bundle ``archive`` (a zip,
signed the same way, extracted into the generation and carrying the fixed
``__owner__.py`` / ``__setup__.py`` / ``__manage__.py`` shims), and the runtime
protocol. Each of the two protocol numbers must fall in this host's window
(:data:`RELEASE_WINDOW`, :data:`RUNTIME_WINDOW`): the current protocol and, once there is
one, the previous.

A catalog (``type: "skulk.catalog"``) lists releases a publisher signed, with a
monotonic ``revision``; reading it installs nothing.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

from skulk_core.plugins.trust import PublisherId, Sha256Hex

MAX_METADATA_BYTES: Final = 128 * 1024
"""Release and catalog documents are bounded to 128 KiB (checked before parsing)."""
MAX_WHEELS: Final = 64
MAX_PERMISSIONS: Final = 32
MAX_CATALOG_ENTRIES: Final = 256
MAX_LIST_ITEMS: Final = 32


class ProtocolWindow(msgspec.Struct, frozen=True, kw_only=True):
    """The protocols a host accepts: ``current`` and, once there is one, ``previous``."""

    current: int
    previous: int | None = None

    @property
    def accepted(self) -> tuple[int, ...]:
        return (self.current,) if self.previous is None else (self.current, self.previous)


RELEASE_WINDOW: Final = ProtocolWindow(current=1)
"""Release-record protocols this host accepts (there is no previous protocol yet)."""
RUNTIME_WINDOW: Final = ProtocolWindow(current=1)
"""Runtime-envelope protocols this host accepts."""
CATALOG_WINDOW: Final = ProtocolWindow(current=1)

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_Short = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
_Title = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
_Time = Annotated[int, msgspec.Meta(ge=0)]
_Count = Annotated[int, msgspec.Meta(ge=1)]
_Items = Annotated[tuple[_Name, ...], msgspec.Meta(max_length=MAX_LIST_ITEMS)]
WHEEL_NAME_PATTERN: Final = r"^[A-Za-z0-9_.+!-]{1,200}\.whl$"
"""A wheel is a plain file name in the release directory: no path, no query."""
ARCHIVE_NAME_PATTERN: Final = r"^[A-Za-z0-9_.+!-]{1,200}\.zip$"
"""The bundle archive is a plain ``.zip`` file name in the release directory."""
BUNDLE_ID_PATTERN: Final = r"^[a-z0-9][a-z0-9._-]{0,127}$"


class ReleaseArtifact(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    filename: Annotated[str, msgspec.Meta(pattern=WHEEL_NAME_PATTERN)]
    sha256: Sha256Hex
    bytes: _Count
    """The signed per-file bound: exactly this many bytes are accepted."""

    def __post_init__(self) -> None:
        if ".." in self.filename:
            raise ValueError("an artifact file name must not contain '..'")


class ReleaseArchive(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The signed bundle archive: fetched and checked exactly as a wheel is."""

    filename: Annotated[str, msgspec.Meta(pattern=ARCHIVE_NAME_PATTERN)]
    sha256: Sha256Hex
    bytes: _Count

    def __post_init__(self) -> None:
        if ".." in self.filename:
            raise ValueError("an artifact file name must not contain '..'")


SignedArtifact = ReleaseArtifact | ReleaseArchive
"""Any file a release signs: a wheel or its bundle archive."""


class ReleaseRuntime(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    protocol: _Count
    python_requires: _Short
    wheels: Annotated[tuple[ReleaseArtifact, ...], msgspec.Meta(max_length=MAX_WHEELS)]
    archive: ReleaseArchive | None = None

    def __post_init__(self) -> None:
        names = [wheel.filename for wheel in self.wheels]
        if len(set(names)) != len(names):
            raise ValueError("a wheel is named twice")
        if not names and self.archive is None:
            raise ValueError("a runtime carries at least one wheel or a bundle archive")

    @property
    def artifacts(self) -> tuple[SignedArtifact, ...]:
        """Every signed file: the wheels, then the archive."""
        return (*self.wheels, *(() if self.archive is None else (self.archive,)))


class ReleaseClaims(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    type: Literal["skulk.release"]
    protocol: _Count
    publisher: PublisherId
    bundle_id: Annotated[str, msgspec.Meta(pattern=BUNDLE_ID_PATTERN)]
    title: _Title | None = None
    version: _Short
    sequence: _Count
    created_at: _Time
    expires_at: _Time
    platform: _Short
    """``any`` for pure-Python wheels, else the exact artifact family."""
    skulk_build_sha256: Sha256Hex | None = None
    """The qualified Skulk build; ``None`` qualifies the release for any build."""
    permissions: Annotated[tuple[_Name, ...], msgspec.Meta(max_length=MAX_PERMISSIONS)] = ()
    runtime: ReleaseRuntime

    @property
    def artifact_bytes(self) -> int:
        """The aggregate bound: every signed artifact (wheels and archive) together."""
        return sum(artifact.bytes for artifact in self.runtime.artifacts)


class CatalogListingFields(msgspec.Struct, frozen=True, kw_only=True):
    """A catalog entry's fields but its address: what a review shows of it
    (``answers.CatalogListing``) and, with the address, what a catalog signs."""

    bundle_id: Annotated[str, msgspec.Meta(pattern=BUNDLE_ID_PATTERN)]
    bundle_version: _Short
    title: _Title | None = None
    publisher: PublisherId
    sequence: _Count
    release_digest: Sha256Hex
    """The ``runtime_digest`` of the signed release record the listing names."""
    runtime_platform: _Short | None
    artifact_sha256: Sha256Hex
    artifact_bytes: _Count
    transfer_bytes: _Count
    platforms: Annotated[tuple[_Short, ...], msgspec.Meta(max_length=MAX_LIST_ITEMS)] = ()
    skulk_build_sha256: Sha256Hex | None = None
    permissions: Annotated[tuple[_Name, ...], msgspec.Meta(max_length=MAX_PERMISSIONS)] = ()
    descriptors: _Items = ()
    surfaces: _Items = ()
    operations: _Items = ()
    steward_risks: _Items = ()
    expires_at: _Time


class CatalogEntry(CatalogListingFields, frozen=True, kw_only=True, forbid_unknown_fields=True):
    release_url: Annotated[str, msgspec.Meta(min_length=9, max_length=2048)]
    """The HTTPS directory (ending in ``/``) that serves the signed ``release.json``."""

    def __post_init__(self) -> None:
        if not self.release_url.startswith("https://") or not self.release_url.endswith("/"):
            raise ValueError("release_url must be an https:// directory ending in /")


class CatalogClaims(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    type: Literal["skulk.catalog"]
    protocol: _Count
    publisher: PublisherId
    revision: _Count
    created_at: _Time
    expires_at: _Time
    entries: Annotated[tuple[CatalogEntry, ...], msgspec.Meta(max_length=MAX_CATALOG_ENTRIES)]


class Envelope(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The served form of a signed document; ``signed`` is kept as decoded JSON so the
    signature is checked over exactly what was parsed."""

    signed: dict[str, Any]
    signature: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{128}$")]


class HostFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What compatibility is judged against: measured by the daemon, passed in."""

    artifact_family: str
    python_version: str
    skulk_build_sha256: str
