"""The pure media job machinery at its bounds: 32 live jobs, 256 records, both planes
in either order, the 10-minute delivery bound, the 45-second grace, 24-hour expiry,
store eviction, and the video and music request checks."""

from __future__ import annotations

import msgspec
import pytest

from skulk_core.media import jobs as plan
from skulk_core.media.jobs import Job, JobRefused
from skulk_core.media.music_wire import MusicRequest, music_spec
from skulk_core.media.video_admission import MAX_UPLOAD_BYTES, derive_mode, video_spec
from skulk_core.media.video_wire import Attachment, VideoRequest
from skulk_core.models.media_cards import MusicCard, ReferenceLimits, VideoCard

OUTPUT = msgspec.Raw(b'{"sha256": "x"}')
STATS = msgspec.Raw(b'{"steps": 1}')
CARD = VideoCard(
    modes=("t2va", "fl2va", "ref2va"),
    min_seconds=1,
    max_seconds=4,
    fps=8,
    default_short_edge=64,
    max_pixels=256 * 256,
    reference_limits=ReferenceLimits(images=4),
)


def job(n: int = 0, status: plan.JobStatus = "queued", **fields: object) -> Job:
    made = Job(id=f"job{n:04d}", family="video", model="m", created_at=1000 + n, status=status)
    return msgspec.structs.replace(made, **fields) if fields else made


def test_the_thirty_third_live_job_is_refused_with_503() -> None:
    plan.admit([job(n) for n in range(31)])
    with pytest.raises(JobRefused) as refused:
        plan.admit([job(n, "in_progress") for n in range(32)])
    assert refused.value.status == 503
    plan.admit([job(n, "completed") for n in range(200)])  # terminal jobs do not count


def test_past_256_records_the_oldest_terminal_ones_go() -> None:
    jobs = [job(0, "queued")] + [job(n, "completed") for n in range(1, 258)]
    forgotten = plan.retained(jobs)
    assert [old.id for old in forgotten] == ["job0001", "job0002"]  # never the live one
    assert plan.retained(jobs[:256]) == ()


@pytest.mark.parametrize("report_first", [True, False])
def test_completion_needs_both_planes_in_either_order(report_first: bool) -> None:
    running = plan.started(job())
    first = (
        plan.reported(running, STATS, 10.0)
        if report_first
        else plan.delivered(running, OUTPUT, 5, 10.0)
    )
    assert first.status == "in_progress"
    both = (
        plan.delivered(first, OUTPUT, 5, 12.0)
        if report_first
        else plan.reported(first, STATS, 12.0)
    )
    assert both.status == "completed" and both.progress == 100
    assert both.expires_at == 12 + plan.CONTENT_RETENTION_S


def test_a_missing_second_plane_fails_after_ten_minutes() -> None:
    half = plan.reported(plan.started(job()), STATS, 100.0)
    assert plan.swept(half, 100.0 + plan.DELIVERY_BOUND_S - 1).status == "in_progress"
    late = plan.swept(half, 100.0 + plan.DELIVERY_BOUND_S)
    assert late.status == "failed" and "ten minutes" in (late.error.message if late.error else "")


def test_a_lost_final_frame_fails_after_the_grace() -> None:
    ended = plan.task_ended(plan.started(job()), 50.0)
    assert plan.swept(ended, 50.0 + plan.LOST_FRAME_GRACE_S - 1).live
    assert plan.swept(ended, 50.0 + plan.LOST_FRAME_GRACE_S).status == "failed"


def test_content_expires_and_a_terminal_job_ignores_later_events() -> None:
    done = plan.delivered(plan.reported(plan.started(job()), STATS, 0.0), OUTPUT, 9, 0.0)
    expired = plan.swept(done, float(plan.CONTENT_RETENTION_S))
    assert expired.status == "completed" and expired.content_bytes == 0
    assert plan.cancelled(done, 1.0) == done
    assert plan.progressed(done, 50, "sampling") == done


def test_progress_only_moves_forward_and_waits_for_completion_to_reach_100() -> None:
    running = plan.progressed(job(), 40, "sampling")
    assert plan.progressed(running, 10, "decoding").progress == 40
    assert plan.progressed(running, 100, "muxing").progress == 99


def test_restart_fails_live_jobs_only() -> None:
    assert plan.restarted(job(), 5.0).status == "failed"
    done = job(status="completed")
    assert plan.restarted(done, 5.0) == done


def test_eviction_takes_the_oldest_completed_content_first() -> None:
    held = [job(n, "completed", content_bytes=40, completed_at=n) for n in range(3)]
    chosen = plan.evictions(held, need_bytes=30, cap_bytes=120)
    assert [old.id for old in chosen] == ["job0000"]
    assert plan.evictions(held, need_bytes=0, cap_bytes=120) == ()
    moved = plan.content_removed(held[0], 7.0)
    assert moved.content_bytes == 0 and moved.expires_at == 7


def test_listing_pages() -> None:
    jobs = [job(n) for n in range(5)]
    first = plan.page(jobs, limit=2, after=None)
    assert [j.id for j in first.data] == ["job0004", "job0003"] and first.has_more
    last = plan.page(jobs, limit=2, after="job0001")
    assert [j.id for j in last.data] == ["job0000"] and not last.has_more
    assert plan.page(jobs, limit=5, after=None, order="asc").first_id == "job0000"
    for limit in (0, 101):
        with pytest.raises(JobRefused):
            plan.page(jobs, limit=limit, after=None)


def part(role: str, size: int = 10, content_type: str = "image/png") -> Attachment:
    return msgspec.convert({"role": role, "content_type": content_type, "size": size}, Attachment)


def test_video_mode_is_derived_from_the_attachments() -> None:
    assert derive_mode([]) == "t2va"
    assert derive_mode([part("first_frame")]) == "fl2va"
    assert derive_mode([part("last_frame"), part("reference")]) == "ref2va"


def test_video_upload_bounds_are_413_at_the_boundary() -> None:
    request = VideoRequest(model="m", prompt="p")
    video_spec(request, [part("reference", MAX_UPLOAD_BYTES)], CARD, 1)
    with pytest.raises(JobRefused) as big:
        video_spec(request, [part("reference", MAX_UPLOAD_BYTES + 1)], CARD, 1)
    assert big.value.status == 413
    with pytest.raises(JobRefused) as many:
        video_spec(request, [part("reference", 1) for _ in range(17)], CARD, 1)
    assert many.value.status == 413


def test_video_spec_resolves_seconds_canvas_and_seed() -> None:
    spec = video_spec(VideoRequest(model="m", prompt="p", seconds="3"), [], CARD, 42)
    assert (spec.seconds, spec.frame_count, spec.seed) == (3, 24, 42)
    assert (spec.width, spec.height) == (112, 64)  # 16:9 on the 64-pixel short edge
    assert video_spec(VideoRequest(model="m", prompt="p"), [], CARD, 1).seconds == 1
    with pytest.raises(JobRefused):
        video_spec(VideoRequest(model="m", prompt="p", seconds=5), [], CARD, 1)


MUSIC = MusicCard(family="test", min_seconds=1, max_seconds=300)


def test_music_requests_at_their_bounds() -> None:
    assert music_spec(MusicRequest(model="m", prompt="p", seconds=120), MUSIC, 3).seed == 3
    for bad in (
        MusicRequest(model="m", prompt="p", seconds=121),
        MusicRequest(model="m", prompt=" ", seconds=1),
        MusicRequest(model="m", prompt="p" * 8001, seconds=1),
        MusicRequest(model="m", prompt="p", seconds=1, lyrics="\t"),
        MusicRequest(model="m", prompt="p", seconds=1, seed=2**32),
    ):
        with pytest.raises(JobRefused) as refused:
            music_spec(bad, MUSIC, 0)
        assert refused.value.status == 422
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"model":"m","prompt":"p","seconds":1,"x":1}', type=MusicRequest)
