"""One family's job store on its API node: job records and stored content under
``<data dir>/media/<family>/``.

``jobs/<id>.json`` is each record (temp + fsync + rename), ``content/<id>/`` the
delivered files, ``work/<id>/`` a job's uploads and the runner's output while it
renders. On open, jobs that were in flight are failed (an API restart cannot finish
them), their work is removed, and completed content stays until it expires.
The transitions themselves are :mod:`skulk_core.media.jobs`'; this module only
applies and persists them.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.media import jobs as plan
from skulk_core.media.jobs import Job, JobFamily
from skulk_daemon.system.media_settings import STORE_FREE_RESERVE_BYTES
from skulk_host.fsutil import atomic_write, ensure_private_dir

log = logging.getLogger(__name__)

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(Job)


class StoreFull(Exception):
    """New content cannot fit even after every older job's content is evicted."""


class JobStore:
    def __init__(self, data_dir: Path, family: JobFamily, cap_bytes: Callable[[], int]) -> None:
        self.family = family
        self._root = data_dir / "media" / family
        self._cap_bytes = cap_bytes
        self._jobs: dict[str, Job] = {}

    # -- paths -------------------------------------------------------------------------

    def work_dir(self, job_id: str) -> Path:
        return self._root / "work" / job_id

    def content_dir(self, job_id: str) -> Path:
        return self._root / "content" / job_id

    def _record(self, job_id: str) -> Path:
        return self._root / "jobs" / f"{job_id}.json"

    # -- lifecycle ---------------------------------------------------------------------

    def open(self) -> None:
        """Read the records left by the last run, failing the jobs it left in flight."""
        for part in ("jobs", "content", "work"):
            ensure_private_dir(self._root / part)
        now = time.time()
        for path in sorted((self._root / "jobs").glob("*.json")):
            try:
                job = _DECODER.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError) as exc:
                log.warning("dropping an unreadable %s job record %s: %s", self.family, path, exc)
                path.unlink(missing_ok=True)
                continue
            if job.live:
                job = plan.restarted(job, now)
            self._jobs[job.id] = job
            self.put(plan.swept(job, now))
        shutil.rmtree(self._root / "work", ignore_errors=True)
        ensure_private_dir(self._root / "work")
        for stale in (self._root / "content").iterdir():
            holder = self._jobs.get(stale.name)
            if holder is None or holder.content_bytes == 0:
                shutil.rmtree(stale, ignore_errors=True)

    # -- records -----------------------------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def all(self) -> list[Job]:
        return list(self._jobs.values())

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def put(self, job: Job, *, persist: bool = True) -> Job:
        """Record ``job``; a job whose content went has its files removed. Records past
        the 256 newest are forgotten (oldest terminal first)."""
        self._jobs[job.id] = job
        if job.content_bytes == 0:
            shutil.rmtree(self.content_dir(job.id), ignore_errors=True)
        if not job.live:
            shutil.rmtree(self.work_dir(job.id), ignore_errors=True)
        if persist:
            atomic_write(self._record(job.id), _ENCODER.encode(job))
        for old in plan.retained(self.all()):
            self.forget(old.id)
        return job

    def forget(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._record(job_id).unlink(missing_ok=True)
        shutil.rmtree(self.content_dir(job_id), ignore_errors=True)
        shutil.rmtree(self.work_dir(job_id), ignore_errors=True)

    # -- content -----------------------------------------------------------------------

    def cap(self) -> int:
        """The configured cap, or what the filesystem can still hold beside what the
        store already holds (minus a reserve), whichever is smaller."""
        held = sum(job.content_bytes for job in self._jobs.values())
        try:
            stats = os.statvfs(self._root)
        except OSError:
            return self._cap_bytes()
        free = stats.f_bavail * stats.f_frsize
        return min(self._cap_bytes(), held + max(0, free - STORE_FREE_RESERVE_BYTES))

    def adopt(self, job: Job, files: list[Path]) -> int:
        """Move a render's verified ``files`` into the job's content, evicting the oldest
        completed content first when the store needs the room. Returns the bytes
        stored. Raises :class:`StoreFull` when it cannot fit."""
        need = sum(path.stat().st_size for path in files)
        now = time.time()
        others = [other for other in self._jobs.values() if other.id != job.id]
        for evicted in plan.evictions(others, need, self.cap()):
            log.info("evicting %s job %s's content to make room", self.family, evicted.id)
            self.put(plan.content_removed(evicted, now))
        held = sum(other.content_bytes for other in self._jobs.values() if other.id != job.id)
        if held + need > self.cap():
            raise StoreFull(f"{need} bytes do not fit in the {self.family} store")
        target = self.content_dir(job.id)
        ensure_private_dir(target)
        for path in files:
            os.replace(path, target / path.name)
        return need
