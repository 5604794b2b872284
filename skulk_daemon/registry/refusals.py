"""Why a registry refresh was refused: python-tuf's failures, named for an operator."""

from __future__ import annotations

from enum import StrEnum


class RefusalReason(StrEnum):
    UNREACHABLE = "unreachable"
    """The repository could not be read (down, refused, timed out, an HTTP error)."""
    EXPIRED = "expired"
    """Freeze: the repository serves metadata past its expiry."""
    ROLLBACK = "rollback"
    """The repository serves an older version than one already trusted here."""
    TAMPERED = "tampered"
    """Signatures, lengths or hashes do not match the trusted metadata."""
    INVALID_CATALOG = "invalid_catalog"
    """The signed catalog target is not a catalog Skulk accepts."""
    NO_TRUSTED_ROOT = "no_trusted_root"
    """``registry.url`` is set but no trusted root.json is."""


def classify(exc: BaseException) -> tuple[RefusalReason, str]:
    """The reason and a one-line explanation for a failed refresh."""
    import urllib3  # noqa: PLC0415 (as python-tuf, loaded where it runs: issue 43)
    from tuf.api import exceptions  # noqa: PLC0415 (python-tuf loads where it runs: issue 43)

    detail = str(exc) or type(exc).__name__
    match exc:
        case exceptions.ExpiredMetadataError():
            return RefusalReason.EXPIRED, f"expired metadata (freeze refused): {detail}"
        case exceptions.BadVersionNumberError():
            return RefusalReason.ROLLBACK, f"older metadata than already trusted: {detail}"
        case exceptions.LengthOrHashMismatchError() | exceptions.DownloadLengthMismatchError():
            return RefusalReason.TAMPERED, f"content does not match its signed hash: {detail}"
        case exceptions.UnsignedMetadataError():
            return RefusalReason.TAMPERED, f"metadata is not signed by trusted keys: {detail}"
        case exceptions.RepositoryError():
            return RefusalReason.TAMPERED, f"metadata failed verification: {detail}"
        case exceptions.DownloadError() | urllib3.exceptions.HTTPError() | OSError():
            return RefusalReason.UNREACHABLE, f"the repository could not be read: {detail}"
        case _:
            return RefusalReason.UNREACHABLE, f"the refresh failed: {type(exc).__name__}: {detail}"
