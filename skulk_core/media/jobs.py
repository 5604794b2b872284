"""The asynchronous media job machinery shared by video and music: the job record, its
transitions, and the bounds the spec states (32 live jobs, 256 records, 24-hour
retention, the 10-minute delivery bound, the lost-frame grace, the store byte cap).

Everything here is pure: functions take a job (or the node's jobs) and the time, and
return new values. The daemon's job store applies them and writes the results.

A job completes only when both planes have arrived: the runner's render report
(``reported``) and the verified container (``delivered``), in either order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Literal

import msgspec

JobFamily = Literal["video", "music"]
JobStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled"]
JobStage = Literal["queued", "encoding", "sampling", "decoding", "muxing", "uploading"]
ListOrder = Literal["asc", "desc"]

LIVE: Final[frozenset[JobStatus]] = frozenset({"queued", "in_progress"})
TERMINAL: Final[frozenset[JobStatus]] = frozenset({"completed", "failed", "cancelled"})

MAX_LIVE_JOBS: Final = 32
"""One API node accepts this many queued or running jobs per family (503 beyond)."""
MAX_JOB_RECORDS: Final = 256
"""The node keeps the newest this many records per family; older terminal ones go."""
CONTENT_RETENTION_S: Final = 24 * 60 * 60
"""Stored content expires this long after completion."""
DELIVERY_BOUND_S: Final = 10 * 60
"""A job whose first half (report or container) arrived this long ago without the
other fails with a delivery error."""
LOST_FRAME_GRACE_S: Final = 45
"""A job whose runner task ended without its final report fails after this grace."""
SWEEP_INTERVAL_S: Final = 15
"""How often the node sweeps its jobs for the bounds above."""
LIST_LIMIT_DEFAULT: Final = 20
LIST_LIMIT_MAX: Final = 100

ERROR_JOB_FAILED: Final = "job_failed"
ERROR_JOB_CANCELLED: Final = "job_cancelled"


class JobError(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str


class JobRefused(ValueError):
    """A request the job machinery will not take; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """One job as its API node records it. ``request`` and ``output`` are the family's
    own values, kept encoded (JSON) so the machinery stays family-neutral."""

    id: str
    family: JobFamily
    model: str
    status: JobStatus = "queued"
    progress: int = 0
    stage: JobStage | None = "queued"
    created_at: int
    created_ns: int = 0
    """Creation time in nanoseconds: orders jobs created within the same second."""
    completed_at: int | None = None
    expires_at: int | None = None
    error: JobError | None = None
    request: msgspec.Raw = msgspec.Raw(b"{}")
    output: msgspec.Raw = msgspec.Raw(b"null")
    """The container facts once delivered (JSON ``null`` before)."""
    stats: msgspec.Raw = msgspec.Raw(b"null")
    """The render report's stats (JSON ``null`` before)."""
    content_bytes: int = 0
    """Bytes of stored content (the container plus any thumbnail); 0 once removed."""
    reported_at: float | None = None
    """When the runner's render report arrived (the first plane)."""
    delivered_at: float | None = None
    """When the verified container arrived (the second plane)."""
    task_ended_at: float | None = None
    """When the runner task ended without a report (the lost-frame grace starts)."""

    @property
    def live(self) -> bool:
        return self.status in LIVE


NOTHING: Final = msgspec.Raw(b"null")
"""What ``Job.output`` and ``Job.stats`` hold before their plane has arrived. (A
``Raw | None`` field cannot be decoded back: msgspec reads it as ``null`` only.)"""


def present(value: msgspec.Raw) -> bool:
    return bytes(value) != b"null"


# -- admission and listing -------------------------------------------------------------


def _created(job: Job) -> tuple[int, int, str]:
    return (job.created_at, job.created_ns, job.id)


def admit(jobs: Iterable[Job]) -> None:
    """Raises :class:`JobRefused` (503) when :data:`MAX_LIVE_JOBS` are live."""
    live = sum(1 for job in jobs if job.live)
    if live >= MAX_LIVE_JOBS:
        raise JobRefused(
            503,
            f"this node already runs {MAX_LIVE_JOBS} live jobs; retry when one finishes",
            "too_many_jobs",
        )


def retained(jobs: Sequence[Job]) -> tuple[Job, ...]:
    """The jobs beyond the newest :data:`MAX_JOB_RECORDS` that may be forgotten: the
    oldest terminal ones (a live job is never forgotten)."""
    excess = len(jobs) - MAX_JOB_RECORDS
    if excess <= 0:
        return ()
    oldest_first = sorted(jobs, key=_created)
    return tuple(job for job in oldest_first if not job.live)[:excess]


class Page(msgspec.Struct, frozen=True, kw_only=True):
    data: tuple[Job, ...]
    first_id: str | None
    last_id: str | None
    has_more: bool


def page(jobs: Iterable[Job], *, limit: int, after: str | None, order: ListOrder = "desc") -> Page:
    """One page of ``jobs`` (newest first for ``desc``), after the job id ``after``.
    Raises :class:`JobRefused` (400) for a limit outside 1..100 or an unknown ``after``."""
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise JobRefused(400, f"limit must be 1 to {LIST_LIMIT_MAX}", "invalid_limit")
    ordered = sorted(jobs, key=_created, reverse=order == "desc")
    start = 0
    if after is not None:
        ids = [job.id for job in ordered]
        if after not in ids:
            raise JobRefused(400, f"after names no job on this node: {after}", "invalid_after")
        start = ids.index(after) + 1
    chosen = tuple(ordered[start : start + limit])
    return Page(
        data=chosen,
        first_id=chosen[0].id if chosen else None,
        last_id=chosen[-1].id if chosen else None,
        has_more=start + limit < len(ordered),
    )


# -- transitions -----------------------------------------------------------------------


def started(job: Job) -> Job:
    if job.status != "queued":
        return job
    return msgspec.structs.replace(job, status="in_progress")


def progressed(job: Job, progress: int, stage: JobStage | None) -> Job:
    """Progress only moves forward, and only on a live job; the last percent waits
    for completion."""
    if not job.live:
        return job
    clamped = max(job.progress, min(99, max(0, progress)))
    return msgspec.structs.replace(
        job, status="in_progress", progress=clamped, stage=stage or job.stage
    )


def reported(job: Job, stats: msgspec.Raw, now: float) -> Job:
    """The runner's render report (first plane) arrived."""
    if not job.live:
        return job
    return _maybe_completed(
        msgspec.structs.replace(job, stats=stats, reported_at=now, status="in_progress"), now
    )


def delivered(job: Job, output: msgspec.Raw, content_bytes: int, now: float) -> Job:
    """The verified container (second plane) arrived and is stored."""
    if not job.live:
        return job
    return _maybe_completed(
        msgspec.structs.replace(
            job, output=output, content_bytes=content_bytes, delivered_at=now, stage="uploading"
        ),
        now,
    )


def _maybe_completed(job: Job, now: float) -> Job:
    if job.reported_at is None or job.delivered_at is None:
        return job
    return msgspec.structs.replace(
        job,
        status="completed",
        progress=100,
        completed_at=int(now),
        expires_at=int(now) + CONTENT_RETENTION_S,
    )


def failed(job: Job, message: str, now: float) -> Job:
    """A live job fails; its partial content is the store's to remove."""
    if not job.live:
        return job
    return msgspec.structs.replace(
        job,
        status="failed",
        completed_at=int(now),
        error=JobError(code=ERROR_JOB_FAILED, message=message),
        output=NOTHING,
        content_bytes=0,
    )


def cancelled(job: Job, now: float) -> Job:
    """A live job is cancelled; a terminal one is returned unchanged."""
    if not job.live:
        return job
    return msgspec.structs.replace(
        job,
        status="cancelled",
        completed_at=int(now),
        error=JobError(code=ERROR_JOB_CANCELLED, message="the job was cancelled"),
        output=NOTHING,
        content_bytes=0,
    )


def task_ended(job: Job, now: float) -> Job:
    """The runner task ended; without a report the lost-frame grace starts."""
    if not job.live or job.reported_at is not None or job.task_ended_at is not None:
        return job
    return msgspec.structs.replace(job, task_ended_at=now)


def content_removed(job: Job, now: float) -> Job:
    """A completed job's content is gone (expired or evicted): ``expires_at`` moves to
    when it went, if that is earlier."""
    if job.status != "completed" or job.content_bytes == 0:
        return job
    expires = int(now) if job.expires_at is None else min(job.expires_at, int(now))
    return msgspec.structs.replace(job, content_bytes=0, expires_at=expires)


def restarted(job: Job, now: float) -> Job:
    """After an API restart: a job that was in flight cannot be finished."""
    return failed(job, "the job was interrupted by a restart of its API node", now)


def swept(job: Job, now: float) -> Job:
    """``job`` after the periodic sweep: the delivery bound, the lost-frame grace and
    content expiry."""
    if job.live:
        halves = [at for at in (job.reported_at, job.delivered_at) if at is not None]
        if halves and now - min(halves) >= DELIVERY_BOUND_S:
            return failed(job, "the rendered content was not delivered within ten minutes", now)
        if job.task_ended_at is not None and now - job.task_ended_at >= LOST_FRAME_GRACE_S:
            return failed(job, "the runner task ended without its final report", now)
        return job
    if job.expires_at is not None and now >= job.expires_at:
        return content_removed(job, now)
    return job


def evictions(jobs: Iterable[Job], need_bytes: int, cap_bytes: int) -> tuple[Job, ...]:
    """The completed jobs whose content goes (oldest completion first) so that
    ``need_bytes`` more fit under ``cap_bytes``; every holder when even that is not
    enough (the caller then refuses the new content)."""
    holding = sorted(
        (job for job in jobs if job.content_bytes > 0 and job.status == "completed"),
        key=lambda job: (job.completed_at or 0, job.delivered_at or 0.0, job.id),
    )
    used = sum(job.content_bytes for job in holding)
    chosen: list[Job] = []
    for job in holding:
        if used + need_bytes <= cap_bytes:
            break
        chosen.append(job)
        used -= job.content_bytes
    return tuple(chosen)
