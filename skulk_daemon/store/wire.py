"""The store's download answer, shared by the internal transport and the public API."""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_core.state.state import DownloadProgress
from skulk_daemon.hub.download import COMPLETED

COMPLETE: Final = "complete"


class StoreDownload(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    model_id: str
    source_revision: str | None
    status: str
    """``pending``, ``in_progress``, ``complete``, ``failed``, ``cancelled`` or, for a
    store-host rejection, ``error`` (with ``error``)."""
    progress: float
    """Fraction of the bytes transferred, 0 to 1."""
    downloaded_bytes: int = 0
    total_bytes: int = 0
    error: str | None = None


def download_body(progress: DownloadProgress, source_revision: str | None = None) -> StoreDownload:
    total = progress.total_bytes
    done = progress.downloaded_bytes
    status = COMPLETE if progress.status == COMPLETED else progress.status
    fraction = 1.0 if status == COMPLETE else (done / total if total > 0 else 0.0)
    return StoreDownload(
        model_id=progress.model_id,
        source_revision=source_revision,
        status=status,
        progress=round(min(max(fraction, 0.0), 1.0), 4),
        downloaded_bytes=done,
        total_bytes=total,
        error=progress.error_message,
    )
