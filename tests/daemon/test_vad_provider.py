"""The built-in vad@1.0.0 provider in a real daemon, driven as an extension drives it.

Stream output rides the data plane to a caller extension, never back over HTTP, so
the test installs the ``stream-relay`` test extension: each case POSTs a script to
``/v1/capabilities/call`` and the relay opens the vad stream through its
``ExtensionContext``, sends generated PCM as inline media, completes, and returns
every frame it received.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from skulk_core.extensions.capabilities import descriptor_revision
from skulk_daemon.providers.vad import VAD_DESCRIPTOR
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, site_env

pytestmark = pytest.mark.slow

REVISION = descriptor_revision(VAD_DESCRIPTOR)
# WebRTC's filters hear a tone for up to ~20 ms after it ends (see test_vad_detector).
FILTER_TAIL_MS = 20


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    site = tmp_path_factory.mktemp("vad-site")
    install_fixture("stream-relay", site)
    daemon = DaemonProcess(
        root=tmp_path_factory.mktemp("vad-node"),
        models_dir=shared_models_dir,
        extra_env=site_env(site),
    )
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()


def pcm(rate: int, *segments: tuple[str, int], channels: int = 1) -> bytes:
    parts = []
    for kind, ms in segments:
        n = rate * ms // 1000
        t = np.arange(n) / rate
        parts.append(0.5 * np.sin(2 * np.pi * 440.0 * t) if kind == "tone" else np.zeros(n))
    mono = np.concatenate(parts)
    samples = np.repeat(mono, channels) if channels > 1 else mono
    return (samples * 32767).astype("<i2").tobytes()


def media(
    data: bytes,
    rate: int,
    *,
    channels: int = 1,
    codec: str = "pcm_s16le",
    media_type: str = "audio/pcm",
) -> dict[str, Any]:
    return {
        "data_b64": base64.b64encode(data).decode(),
        "media_type": media_type,
        "codec": codec,
        "sample_rate": rate,
        "channels": channels,
    }


def chunked(data: bytes, rate: int, size: int) -> list[dict[str, Any]]:
    return [
        {"payload": {"format": "pcm_s16le"}, "media": media(data[i : i + size], rate)}
        for i in range(0, len(data), size)
    ]


def relay(
    daemon: DaemonProcess, payload: dict[str, Any], chunks: list[dict[str, Any]]
) -> dict[str, Any]:
    """Run one vad stream through the relay; its typed result."""
    envelope = {
        "call_id": uuid.uuid4().hex,
        "capability_id": "stream-relay",
        "version": "1.0.0",
        "descriptor_revision": relay_revision(daemon),
        "caller_node": "tests",
        "target_node": node_id(daemon),
        "timeout_seconds": 60,
        "payload": {
            "capability_id": "vad",
            "version": "1.0.0",
            "revision": REVISION,
            "payload": payload,
            "chunks": chunks,
            "timeout": 45,
        },
    }
    response = httpx.post(f"{daemon.url}/v1/capabilities/call", json=envelope, timeout=90)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["ok"], body
    result: dict[str, Any] = body["result"]
    return result


def node_id(daemon: DaemonProcess) -> str:
    response = httpx.get(f"{daemon.url}/node_id", timeout=5)
    value = response.json()
    return str(value["node_id"] if isinstance(value, dict) else value)


def listing(daemon: DaemonProcess) -> dict[str, Any]:
    response = httpx.get(f"{daemon.url}/v1/capabilities", timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def descriptors(daemon: DaemonProcess) -> dict[str, dict[str, Any]]:
    return {f"{d['id']}@{d['version']}": d for d in listing(daemon)["capabilities"]}


def relay_revision(daemon: DaemonProcess) -> str:
    return str(listing(daemon)["revisions"]["stream-relay@1.0.0"])


def events(result: dict[str, Any]) -> list[dict[str, Any]]:
    frames = result["frames"]
    assert result["open"]["ok"], result["open"]
    assert [f["sequence"] for f in frames] == list(range(len(frames)))
    assert frames[0]["kind"] == "started"
    assert frames[-1]["kind"] == "completed", frames[-1]
    assert all(f["kind"] == "chunk" for f in frames[1:-1])
    return [f["payload"] for f in frames[1:-1]]


def failure(result: dict[str, Any]) -> dict[str, Any]:
    assert result["open"]["ok"], result["open"]
    last = result["frames"][-1]
    assert last["kind"] == "failed", result["frames"]
    error: dict[str, Any] = last["error"]
    return error


def test_the_production_api_lists_vad(node: DaemonProcess) -> None:
    body = listing(node)
    found = descriptors(node)["vad@1.0.0"]
    assert found["io_mode"] == "bidirectional"
    assert found["input_schema"]["required"] == ["sample_rate"]
    assert found["input_schema"]["properties"]["sample_rate"]["enum"] == [8000, 16000, 32000, 48000]
    assert body["revisions"]["vad@1.0.0"] == REVISION


def test_the_node_advertises_the_vad_tag(node: DaemonProcess) -> None:
    me = node_id(node)
    deadline = time.monotonic() + 30
    while True:
        tags = httpx.get(f"{node.url}/state", timeout=10).json()["nodeCapabilities"].get(me, [])
        if "vad" in tags or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "vad" in tags


@pytest.mark.parametrize(
    ("rate", "frame_ms", "piece"), [(8000, 10, 1234), (16000, 20, 3334), (48000, 30, 40000)]
)
def test_silence_tone_silence_reports_the_tone(
    node: DaemonProcess, rate: int, frame_ms: int, piece: int
) -> None:
    data = pcm(rate, ("silence", 1005), ("tone", 1000), ("silence", 1000))
    result = relay(node, {"sample_rate": rate, "frame_ms": frame_ms}, chunked(data, rate, piece))

    started, stopped = events(result)
    assert started["event"] == "speech_started"
    assert stopped["event"] == "speech_stopped"
    assert stopped["reason"] == "silence"
    assert started["utterance"] == stopped["utterance"] == 0
    assert abs(started["start_ms"] - 1005) < frame_ms
    assert 2005 <= stopped["end_ms"] <= 2005 + frame_ms + FILTER_TAIL_MS
    for payload in (started, stopped):
        assert payload["start_ms"] % frame_ms == 0
        assert payload["start_sample"] == payload["start_ms"] * rate // 1000
    assert stopped["end_sample"] == stopped["end_ms"] * rate // 1000
    assert stopped["duration_ms"] == stopped["end_ms"] - stopped["start_ms"]
    summary = result["frames"][-1]["payload"]
    assert summary == {
        "utterances": 1,
        "samples_received": len(data) // 2,
        "samples_classified": len(data)
        // 2
        // (rate * frame_ms // 1000)
        * (rate * frame_ms // 1000),
    }


def test_settings_shape_the_events(node: DaemonProcess) -> None:
    rate = 16000
    data = pcm(
        rate, ("silence", 500), ("tone", 600), ("silence", 400), ("tone", 600), ("silence", 900)
    )
    chunks = chunked(data, rate, 6400)
    split = events(relay(node, {"sample_rate": rate, "frame_ms": 20, "hangover_ms": 200}, chunks))
    assert [e["event"] for e in split] == ["speech_started", "speech_stopped"] * 2
    bridged = events(
        relay(
            node,
            {"sample_rate": rate, "frame_ms": 20, "hangover_ms": 600, "preroll_ms": 200},
            chunks,
        )
    )
    started, stopped = bridged
    assert started["onset_ms"] - started["start_ms"] == 200
    assert 2100 <= stopped["end_ms"] <= 2100 + 20 + FILTER_TAIL_MS


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"sample_rate": 44100},
        {"sample_rate": 16000, "aggressiveness": 4},
        {"sample_rate": 16000, "aggressiveness": -1},
        {"sample_rate": 16000, "frame_ms": 15},
        {"sample_rate": 16000, "min_speech_ms": 2001},
        {"sample_rate": 16000, "hangover_ms": 5001},
        {"sample_rate": 16000, "preroll_ms": 1001},
        {"sample_rate": 16000, "max_utterance_ms": 4999},
        {"sample_rate": 16000, "max_utterance_ms": 600_001},
        {"sample_rate": 16000, "channels": 2},
    ],
)
def test_a_setting_out_of_bounds_is_refused_at_opening(
    node: DaemonProcess, settings: dict[str, Any]
) -> None:
    result = relay(node, settings, [])
    assert result["open"]["ok"] is False
    assert result["open"]["error"]["code"] == "invalid_payload"
    assert result["frames"] == []


BAD_MEDIA = {
    "another rate": lambda data: media(data, 8000),
    "stereo": lambda data: media(pcm(16000, ("tone", 200), channels=2), 16000, channels=2),
    "odd byte count": lambda data: media(data[:-1], 16000),
    "another codec": lambda data: media(data, 16000, codec="opus"),
    "another media type": lambda data: media(data, 16000, media_type="audio/wav"),
}


@pytest.mark.parametrize("case", sorted(BAD_MEDIA))
def test_mismatched_media_fails_only_that_call(node: DaemonProcess, case: str) -> None:
    rate = 16000
    good = pcm(rate, ("silence", 700), ("tone", 800), ("silence", 800))
    bad_chunks = [
        *chunked(good[:6400], rate, 6400),
        {"payload": None, "media": BAD_MEDIA[case](good[:6400])},
    ]
    with ThreadPoolExecutor(2) as pool:
        bad_call = pool.submit(relay, node, {"sample_rate": rate}, bad_chunks)
        good_call = pool.submit(relay, node, {"sample_rate": rate}, chunked(good, rate, 4000))
        bad, fine = bad_call.result(), good_call.result()
    assert failure(bad)["code"] == "invalid_payload"
    assert [e["event"] for e in events(fine)] == ["speech_started", "speech_stopped"]


def test_a_chunk_without_audio_fails_the_call(node: DaemonProcess) -> None:
    result = relay(
        node, {"sample_rate": 16000}, [{"payload": {"format": "pcm_s16le"}, "media": None}]
    )
    assert failure(result)["code"] == "invalid_payload"
