"""Video and music jobs on one real daemon running the spec's test engines
(``SKULK_TEST_VIDEO_ENGINE=1``, ``SKULK_TEST_MUSIC_ENGINE=1``): the bundled cards are
placed like any model, every render runs in a runner subprocess, and what comes back
is read from the files themselves (PyAV for the MP4, ``wave`` for the WAV)."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest
from typer.testing import CliRunner, Result

from skulk_cli.main import app as cli_app
from tests.daemon.serving import place, wait_for
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

VIDEO = "foxlight/test-video"
MUSIC = "foxlight/test-music"
STEP_SECONDS = 0.25
"""Each test-engine step (a video sampling step, a second of music) takes this long,
so a long job is still running when a test cancels it."""


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("media-daemon"),
        models_dir=tmp_path_factory.mktemp("media-models"),
        extra_env={
            "SKULK_TEST_VIDEO_ENGINE": "1",
            "SKULK_TEST_MUSIC_ENGINE": "1",
            "SKULK_TEST_VIDEO_STEP_SECONDS": str(STEP_SECONDS),
            "SKULK_TEST_MUSIC_BLOCK_SECONDS": str(STEP_SECONDS),
        },
    )
    node.start()
    try:
        place(node, model_id=VIDEO)
        place(node, model_id=MUSIC)
        yield node
    finally:
        node.kill()


def api(daemon: DaemonProcess) -> httpx.Client:
    return httpx.Client(base_url=daemon.url, timeout=30)


def settled(client: httpx.Client, route: str, job_id: str) -> dict[str, Any]:
    def terminal() -> dict[str, Any] | None:
        job: dict[str, Any] = client.get(f"{route}/{job_id}").json()
        return job if job["status"] in ("completed", "failed", "cancelled") else None

    done: dict[str, Any] = wait_for(terminal, f"{job_id} to settle", timeout=120)
    return done


def png(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="image2pipe") as out:
        stream = out.add_stream("png", rate=1)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "rgb24"
        pixels = np.full((32, 32, 3), colour, dtype=np.uint8)
        for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
            out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


@pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")
def test_video_job_from_create_to_a_verified_mp4(daemon: DaemonProcess) -> None:
    sdk = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)
    created = sdk.videos.create(model=VIDEO, prompt="A red fox in snow", seconds="2", size="64x48")
    assert created.status == "queued" and created.object == "video"
    with api(daemon) as client:
        job = settled(client, "/v1/videos", created.id)
        assert job["status"] == "completed", job
        assert job["progress"] == 100 and job["mode"] == "t2va" and job["audio"] is True
        assert job["seconds"] == "2" and job["size"] == "64x48"
        assert job["expires_at"] - job["completed_at"] == 24 * 3600
        engine = job["stats"]["engine"]
        assert engine["width"] == 64 and engine["height"] == 48 and engine["frame_count"] == 16
        assert isinstance(engine["seed"], int)  # assigned, since the request gave none
    clip = sdk.videos.download_content(created.id).content
    output = job["output"]
    assert hashlib.sha256(clip).hexdigest() == output["sha256"]
    assert len(clip) == output["size_bytes"]
    with av.open(io.BytesIO(clip), mode="r") as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        assert video.codec_context.name == "mjpeg" and audio.codec_context.name == "pcm_s16le"
        assert (video.codec_context.width, video.codec_context.height) == (64, 48)
        assert audio.codec_context.sample_rate == output["audio_sample_rate"]
        frames = len(list(container.decode(video=0)))
    assert frames == output["frame_count"] == 16
    thumbnail = sdk.videos.download_content(created.id, variant="thumbnail").content
    assert thumbnail[:2] == b"\xff\xd8"  # a JPEG
    assert hashlib.sha256(thumbnail).hexdigest() == output["thumbnail_sha256"]


def test_a_first_frame_makes_fl2va_and_tints_the_clip(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        made = client.post(
            "/v1/videos",
            data={"model": VIDEO, "prompt": "fox", "seconds": "1", "seed": "7", "audio": "false"},
            files={"input_reference": ("first.png", png((250, 10, 10)), "image/png")},
        )
        assert made.status_code == 200, made.text
        assert made.json()["mode"] == "fl2va"
        job = settled(client, "/v1/videos", made.json()["id"])
        assert job["status"] == "completed", job
        assert job["output"]["audio_codec"] is None and job["stats"]["engine"]["seed"] == 7
        clip = client.get(f"/v1/videos/{job['id']}/content").content
    with av.open(io.BytesIO(clip), mode="r") as container:
        first = next(container.decode(video=0)).to_ndarray(format="rgb24")
    red, green = first[..., 0].mean(), first[..., 1].mean()
    assert red > green + 40  # half the first frame is the keyframe's red


def test_cancel_mid_render_then_delete(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        job = client.post(
            "/v1/videos", json={"model": VIDEO, "prompt": "slow", "seconds": 1, "steps": 200}
        ).json()
        wait_for(
            lambda: client.get(f"/v1/videos/{job['id']}").json()["stage"] == "sampling",
            "sampling",
        )
        early = client.get(f"/v1/videos/{job['id']}/content")
        assert early.status_code == 409
        running = client.get(f"/v1/videos/{job['id']}").json()
        assert running["status"] == "in_progress" and 0 < running["progress"] < 100
        cancelled = client.post(f"/v1/videos/{job['id']}/cancel").json()
        assert cancelled["status"] == "cancelled"
        assert cancelled["error"]["code"] == "job_cancelled"
        again = client.post(f"/v1/videos/{job['id']}/cancel").json()
        assert again == cancelled  # a terminal job comes back unchanged
        # The runner is free again: the next render completes.
        quick = client.post("/v1/videos", json={"model": VIDEO, "prompt": "after"}).json()
        assert settled(client, "/v1/videos", quick["id"])["status"] == "completed"
        deleted = client.delete(f"/v1/videos/{quick['id']}")
        assert deleted.json() == {"id": quick["id"], "object": "video.deleted", "deleted": True}
        assert client.get(f"/v1/videos/{quick['id']}").status_code == 404
        assert client.get(f"/v1/videos/{quick['id']}/content").status_code == 404


def test_generic_cancel_route_stops_a_video_job(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        job = client.post(
            "/v1/videos", json={"model": VIDEO, "prompt": "slow", "steps": 200}
        ).json()
        answer = client.post(f"/v1/cancel/{job['id']}")
        assert answer.status_code == 200, answer.text
        assert client.get(f"/v1/videos/{job['id']}").json()["status"] == "cancelled"
        assert client.post(f"/v1/cancel/{job['id']}").status_code == 404


def test_listing_pages_newest_first_and_in_order(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        ids = [
            client.post("/v1/videos", json={"model": VIDEO, "prompt": f"p{n}"}).json()["id"]
            for n in range(3)
        ]
        for job_id in ids:
            settled(client, "/v1/videos", job_id)
        first = client.get("/v1/videos", params={"limit": 2}).json()
        assert first["object"] == "list" and first["has_more"] is True
        assert [job["id"] for job in first["data"]] == [ids[2], ids[1]]
        rest = client.get("/v1/videos", params={"limit": 2, "after": first["last_id"]}).json()
        assert rest["data"][0]["id"] == ids[0]
        oldest = client.get("/v1/videos", params={"limit": 1, "order": "asc"}).json()
        assert oldest["data"][0]["created_at"] <= first["data"][-1]["created_at"]
        assert client.get("/v1/videos", params={"limit": 0}).status_code == 400
        assert client.get("/v1/videos", params={"limit": 101}).status_code == 400


def test_the_catalog_lists_the_cards_contracts(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        models = {item["id"]: item for item in client.get("/v1/models").json()["data"]}
    video, music = models[VIDEO], models[MUSIC]
    assert video["tasks"] == ["TextToVideo"] and video["music"] is None
    assert video["video"]["modes"] == ["t2va", "fl2va", "ref2va"]
    assert (video["video"]["min_seconds"], video["video"]["max_seconds"]) == (1, 4)
    assert music["music"]["output_format"] == "wav" and music["music"]["max_seconds"] == 120


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"model": "nobody/nothing", "prompt": "x"}, 404, "not in the catalog"),
        ({"model": MUSIC, "prompt": "x"}, 400, "TextToVideo"),
        ({"model": VIDEO}, 400, "prompt is required"),
        ({"model": VIDEO, "prompt": "x", "seconds": 9}, 400, "seconds must be 1 to 4"),
        ({"model": VIDEO, "prompt": "x", "size": "65x48"}, 400, "multiple of 16"),
        ({"model": VIDEO, "prompt": "x", "size": "1024x1024"}, 400, "pixels"),
        ({"model": VIDEO, "prompt": "x", "codec": "av1"}, 400, "offered: mjpeg"),
        ({"model": VIDEO, "prompt": "x", "control_strength": 1}, 400, "control"),
        ({"model": VIDEO, "prompt": "x", "reference_fidelity": "max"}, 400, "ref2va only"),
        ({"model": VIDEO, "prompt": "x", "lora": "turbo"}, 400, "adapters"),
        ({"model": VIDEO, "prompt": "x", "video_shift": 500}, 400, "0.01 to 100"),
    ],
)
def test_video_refusals(
    daemon: DaemonProcess, body: dict[str, Any], status: int, says: str
) -> None:
    with api(daemon) as client:
        answer = client.post("/v1/videos", json=body)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["error"]["message"]


def test_attachment_bounds(daemon: DaemonProcess) -> None:
    image = png((0, 0, 255))
    with api(daemon) as client:
        too_many = client.post(
            "/v1/videos",
            data={"model": VIDEO, "prompt": "x"},
            files=[("reference", (f"r{n}.png", image, "image/png")) for n in range(17)],
        )
        assert too_many.status_code == 413
        untyped = client.post(
            "/v1/videos",
            data={"model": VIDEO, "prompt": "x"},
            files={"reference": ("r.txt", b"hello", "text/plain")},
        )
        assert untyped.status_code == 400 and "image/*" in untyped.text
        two_firsts = client.post(
            "/v1/videos",
            data={"model": VIDEO, "prompt": "x"},
            files=[
                ("input_reference", ("a.png", image, "image/png")),
                ("first_frame", ("b.png", image, "image/png")),
            ],
        )
        assert two_firsts.status_code == 400 and "first_frame" in two_firsts.text
        over_limit = client.post(
            "/v1/videos",
            data={"model": VIDEO, "prompt": "x"},
            files=[("reference", (f"r{n}.png", image, "image/png")) for n in range(5)],
        )
        assert over_limit.status_code == 400 and "at most 4 image references" in over_limit.text
        keyframe_late = client.post(
            "/v1/videos",
            data={"model": VIDEO, "prompt": "x", "seconds": "1", "keyframe_at": "3"},
            files={"keyframe": ("k.png", image, "image/png")},
        )
        assert keyframe_late.status_code == 400 and "keyframe_at" in keyframe_late.text
    # A body past the bound is refused from its declared length, before it is read.
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    connection.putrequest("POST", "/v1/videos")
    connection.putheader("Content-Type", "multipart/form-data; boundary=x")
    connection.putheader("Content-Length", str(257 * 1024 * 1024 + 1024 * 1024))
    connection.endheaders()
    connection.send(b"--x\r\n")
    assert connection.getresponse().status == 413
    connection.close()


def test_thirty_two_live_jobs_then_503(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        made = [
            client.post("/v1/videos", json={"model": VIDEO, "prompt": "q", "steps": 200})
            for _ in range(32)
        ]
        assert all(answer.status_code == 200 for answer in made)
        refused = client.post("/v1/videos", json={"model": VIDEO, "prompt": "q"})
        assert refused.status_code == 503
        for answer in made:
            client.post(f"/v1/videos/{answer.json()['id']}/cancel")
        assert client.post("/v1/videos", json={"model": VIDEO, "prompt": "q"}).status_code == 200


def test_music_job_to_a_measured_wav(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        made = client.post(
            "/v1/music", json={"model": MUSIC, "prompt": "calm piano", "seconds": 3, "seed": 9}
        )
        assert made.status_code == 200, made.text
        created = made.json()
        assert created["status"] == "queued" and created["object"] == "music"
        assert created["completed_at"] is None and created["output"] is None
        assert client.get(f"/v1/music/{created['id']}/content").status_code == 409
        job = settled(client, "/v1/music", created["id"])
        assert job["status"] == "completed", job
        wav_bytes = client.get(f"/v1/music/{created['id']}/content")
        assert wav_bytes.headers["content-type"].startswith("audio/wav")
        output = job["output"]
        assert hashlib.sha256(wav_bytes.content).hexdigest() == output["sha256"]
        with wave.open(io.BytesIO(wav_bytes.content)) as wav:
            seconds = wav.getnframes() / wav.getframerate()
            assert wav.getnchannels() == output["channels"]
        assert seconds == pytest.approx(3.0) == output["duration_seconds"]
        listed = client.get("/v1/music", params={"limit": 1}).json()
        assert listed["data"][0]["id"] == created["id"]
        gone = client.delete(f"/v1/music/{created['id']}").json()
        assert gone == {"id": created["id"], "object": "music.deleted", "deleted": True}
        assert client.get(f"/v1/music/{created['id']}/content").status_code == 404


def test_music_cancel_mid_generation(daemon: DaemonProcess) -> None:
    with api(daemon) as client:
        job = client.post("/v1/music", json={"model": MUSIC, "prompt": "long", "seconds": 120})
        job_id = job.json()["id"]
        wait_for(lambda: client.get(f"/v1/music/{job_id}").json()["progress"] > 5, "progress")
        assert client.post(f"/v1/music/{job_id}/cancel").json()["status"] == "cancelled"
        quick = client.post("/v1/music", json={"model": MUSIC, "prompt": "next", "seconds": 1})
        assert settled(client, "/v1/music", quick.json()["id"])["status"] == "completed"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"model": MUSIC, "prompt": "x", "seconds": 3, "tempo": 90}, "tempo"),
        ({"model": MUSIC, "prompt": "   ", "seconds": 3}, "blank"),
        ({"model": MUSIC, "prompt": "x", "seconds": 3, "lyrics": " \n"}, "blank"),
        ({"model": MUSIC, "prompt": "x", "seconds": 121}, "1 to 120"),
        ({"model": MUSIC, "prompt": "x", "seconds": 3, "seed": -1}, "seed"),
        ({"model": MUSIC, "prompt": "x"}, "seconds"),
    ],
)
def test_music_refusals_are_422(daemon: DaemonProcess, body: dict[str, Any], says: str) -> None:
    with api(daemon) as client:
        answer = client.post("/v1/music", json=body)
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["error"]["message"]


def skulk(daemon: DaemonProcess, *args: str) -> Result:
    return CliRunner().invoke(
        cli_app, ["--api-url", daemon.url, *args], env={"COLUMNS": "120"}, prog_name="skulk"
    )


def test_cli_video_create_follows_the_job_and_writes_the_mp4(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    out = tmp_path / "clip.mp4"
    made = skulk(
        daemon, "video", "create", VIDEO, "a fox", "--seconds", "1", "-o", str(out), "--json"
    )
    assert made.exit_code == 0, made.output
    job = json.loads(made.stdout)
    assert job["status"] == "completed"
    with av.open(str(out), mode="r") as container:
        assert len(list(container.decode(video=0))) == job["output"]["frame_count"] == 8
    shown = skulk(daemon, "video", "status", job["id"])
    assert shown.exit_code == 0 and "completed" in shown.output and "mjpeg" in shown.output
    thumb = tmp_path / "thumb.jpg"
    fetched = skulk(daemon, "video", "download", job["id"], "-o", str(thumb), "--thumbnail")
    assert fetched.exit_code == 0 and thumb.read_bytes()[:2] == b"\xff\xd8"


def test_cli_music_create_status_and_cancel(daemon: DaemonProcess, tmp_path: Path) -> None:
    out = tmp_path / "piece.wav"
    made = skulk(daemon, "music", "create", MUSIC, "a tune", "--seconds", "2", "-o", str(out))
    assert made.exit_code == 0, made.output
    with wave.open(str(out)) as wav:
        assert wav.getnframes() / wav.getframerate() == pytest.approx(2.0)
    queued = skulk(daemon, "music", "create", MUSIC, "long", "--seconds", "120", "--json")
    job_id = json.loads(queued.stdout)["id"]
    stopped = skulk(daemon, "music", "cancel", job_id, "--json")
    assert stopped.exit_code == 0 and json.loads(stopped.stdout)["status"] == "cancelled"
    waited = skulk(daemon, "music", "status", job_id, "--wait")
    assert waited.exit_code == 0 and "cancelled" in waited.output
    early = skulk(daemon, "music", "download", job_id, "-o", str(tmp_path / "x.wav"))
    assert early.exit_code == 1 and "cancelled" in early.output
