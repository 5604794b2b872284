"""The images this API node keeps for ``response_format: "url"`` answers.

Node-local and short-lived, as the spec says: each image lives one hour after it was
stored, then ``GET /images/{id}`` answers 404 ("Image not found or expired"). The
bytes sit in files under the node's data dir (written to a temp file, fsynced, renamed),
their index in memory: a restart forgets them, which their one-hour life allows. At
most :data:`MAX_STORED_IMAGES` are kept; storing one more drops the oldest.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from skulk_host.fsutil import atomic_write

IMAGE_LIFETIME_SECONDS: Final = 3600
MAX_STORED_IMAGES: Final = 1024
ID_PREFIX: Final = "img_"


@dataclass(frozen=True, slots=True)
class StoredImage:
    image_id: str
    content_type: str
    created_at: float
    expires_at: float
    path: Path


class ImageStore:
    def __init__(
        self,
        directory: Path,
        *,
        lifetime: float = IMAGE_LIFETIME_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._directory = directory
        self._lifetime = lifetime
        self._clock = clock
        self._images: dict[str, StoredImage] = {}
        # NOTE: puts run in worker threads (file I/O off the event loop) while reads
        # list and prune on the loop: one lock keeps the index whole.
        self._lock = threading.Lock()
        self._cleared = False

    def put(self, data: bytes, content_type: str, extension: str) -> StoredImage:
        """Store ``data`` (blocking file I/O: call it off the event loop)."""
        self._clear_leftovers()
        image_id = ID_PREFIX + secrets.token_urlsafe(18)
        path = self._directory / f"{image_id}.{extension}"
        atomic_write(path, data, mode=0o600)
        now = self._clock()
        stored = StoredImage(
            image_id=image_id,
            content_type=content_type,
            created_at=now,
            expires_at=now + self._lifetime,
            path=path,
        )
        with self._lock:
            self._images[image_id] = stored
            dropped = self._prune_locked(now)
            while len(self._images) > MAX_STORED_IMAGES:
                oldest = min(self._images.values(), key=lambda image: image.created_at)
                dropped.append(self._images.pop(oldest.image_id))
        _remove(dropped)
        return stored

    def get(self, image_id: str) -> tuple[StoredImage, bytes] | None:
        """The live image and its bytes; None when unknown or expired."""
        with self._lock:
            dropped = self._prune_locked(self._clock())
            stored = self._images.get(image_id)
        _remove(dropped)
        if stored is None:
            return None
        try:
            return stored, stored.path.read_bytes()
        except OSError:
            return None

    def live(self) -> list[StoredImage]:
        """Every live image, oldest first."""
        with self._lock:
            dropped = self._prune_locked(self._clock())
            images = sorted(self._images.values(), key=lambda image: image.created_at)
        _remove(dropped)
        return images

    def _prune_locked(self, now: float) -> list[StoredImage]:
        expired = [image for image in self._images.values() if image.expires_at <= now]
        for image in expired:
            del self._images[image.image_id]
        return expired

    def _clear_leftovers(self) -> None:
        """Files a previous run stored are unreachable (the index is in memory)."""
        if self._cleared:
            return
        self._cleared = True
        if self._directory.is_dir():
            _remove_paths(self._directory.glob(f"{ID_PREFIX}*"))


def _remove(images: list[StoredImage]) -> None:
    _remove_paths(image.path for image in images)


def _remove_paths(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()
