"""The store's download answer (:class:`~skulk_core.store.answers.StoreDownload`) made
from a download's progress, shared by the internal transport and the public API."""

from __future__ import annotations

from typing import Final

from skulk_core.state.state import DownloadProgress
from skulk_core.store.answers import StoreDownload
from skulk_daemon.hub.download import COMPLETED

# StoreDownload is re-exported: the store transport names it here.
__all__ = ["COMPLETE", "StoreDownload", "download_body"]

COMPLETE: Final = "complete"


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
