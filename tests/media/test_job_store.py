"""The job store on a real directory: what an API restart leaves (in-flight jobs
failed, completed content kept until it expires), the 256-record bound and eviction
under the byte cap."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from skulk_core.media import jobs as plan
from skulk_core.media.jobs import Job
from skulk_daemon.media.store import JobStore

STATS = msgspec.Raw(b"{}")
OUTPUT = msgspec.Raw(b'{"sha256": "x"}')


def completed(store: JobStore, job_id: str, payload: bytes, created: int = 0) -> Job:
    job = store.put(
        Job(id=job_id, family="music", model="m", created_at=created or int(time.time()))
    )
    work = store.work_dir(job_id)
    work.mkdir(parents=True, exist_ok=True)
    (work / "music.wav").write_bytes(payload)
    job = store.put(plan.reported(job, STATS, time.time()))
    stored = store.adopt(job, [work / "music.wav"])
    return store.put(plan.delivered(job, OUTPUT, stored, time.time()))


def test_a_restart_fails_jobs_in_flight_and_keeps_completed_content(tmp_path: Path) -> None:
    store = JobStore(tmp_path, "music", lambda: 10**9)
    store.open()
    done = completed(store, "done", b"RIFF-done")
    flying = store.put(
        plan.started(Job(id="flying", family="music", model="m", created_at=int(time.time())))
    )
    (store.work_dir(flying.id) / "out").mkdir(parents=True)

    reopened = JobStore(tmp_path, "music", lambda: 10**9)
    reopened.open()
    lost = reopened.get("flying")
    assert lost is not None and lost.status == "failed"
    assert lost.error is not None and "restart" in lost.error.message
    assert not reopened.work_dir("flying").exists()  # partial output removed
    kept = reopened.get("done")
    assert kept == done
    assert (reopened.content_dir("done") / "music.wav").read_bytes() == b"RIFF-done"


def test_new_content_evicts_the_oldest_completed_first(tmp_path: Path) -> None:
    store = JobStore(tmp_path, "music", lambda: 20)
    store.open()
    completed(store, "old", b"x" * 10)
    completed(store, "mid", b"y" * 10)
    completed(store, "new", b"z" * 10)
    old = store.get("old")
    assert old is not None and old.content_bytes == 0 and old.expires_at is not None
    assert old.expires_at <= int(time.time())  # expires_at moved to the eviction
    assert not store.content_dir("old").exists()
    assert all(job.content_bytes == 10 for job in store if job.id != "old")


def test_only_the_newest_256_records_are_kept(tmp_path: Path) -> None:
    store = JobStore(tmp_path, "music", lambda: 10**9)
    store.open()
    for n in range(258):
        store.put(
            plan.failed(
                Job(id=f"j{n:03d}", family="music", model="m", created_at=1000 + n), "x", 0.0
            )
        )
    assert len(store.all()) == 256
    assert store.get("j000") is None and store.get("j257") is not None
    assert len(list((tmp_path / "media" / "music" / "jobs").glob("*.json"))) == 256
