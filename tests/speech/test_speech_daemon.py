"""Speech on a real daemon process that assembled the speech demos on its first start and
serves them from placed runners: the CLI (`skulk say`, `skulk transcribe`, `skulk voices`)
and the built-in `tts@1.0.0`/`stt@1.0.0` providers, driven as an extension drives them
(through the `stream-relay` test extension, as tests/daemon/test_vad_provider.py does)."""

from __future__ import annotations

import base64
import os
import re
import stat
import time
import uuid
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from skulk_cli.main import app
from skulk_core.extensions.capabilities import descriptor_revision
from skulk_daemon.speech.providers import STT_DESCRIPTOR, TTS_DESCRIPTOR
from tests.daemon.serving import place, wait_for
from tests.daemon.test_cluster import converged
from tests.daemon.test_vad_provider import descriptors, node_id, relay_revision
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, site_env
from tests.speech.test_speech_api import STT, TTS, word_error_rate

pytestmark = pytest.mark.slow

SENTENCE = "The quick brown fox jumps over the lazy dog."
runner = CliRunner()


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    site = tmp_path_factory.mktemp("speech-site")
    install_fixture("stream-relay", site)
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("speech-daemon"),
        models_dir=shared_models_dir,
        extra_env=site_env(site),
    )
    node.start()
    try:
        place(node, model_id=TTS)
        place(node, model_id=STT)
        yield node
    finally:
        node.kill()


def skulk(daemon: DaemonProcess, *args: str) -> Result:
    return runner.invoke(
        app, ["--api-url", daemon.url, *args], env={"COLUMNS": "120"}, prog_name="skulk"
    )


def test_say_writes_a_wav_that_transcribe_reads_back(daemon: DaemonProcess, tmp_path: Path) -> None:
    out = tmp_path / "out.wav"
    said = skulk(daemon, "say", TTS, SENTENCE, "-o", str(out), "--seed", "7")
    assert said.exit_code == 0, said.output
    assert "audio/wav" in said.output
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 22_050 and wav.getnframes() > 22_050
    assert not list(tmp_path.glob(".*.tmp"))  # written whole, through a temp file
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # as a redirection would
    heard = skulk(daemon, "transcribe", STT, str(out))
    assert heard.exit_code == 0, heard.output
    assert word_error_rate(SENTENCE, heard.output.strip().splitlines()[-1]) == 0.0

    subtitles = skulk(daemon, "transcribe", STT, str(out), "--format", "srt")
    assert subtitles.exit_code == 0
    assert re.search(r"^1\n00:00:00,000 --> 00:00:\d\d,\d{3}\n", subtitles.output, re.M)


def test_say_follows_the_extension_and_refusals_exit_1(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    mp3 = tmp_path / "out.mp3"
    said = skulk(daemon, "say", TTS, SENTENCE, "-o", str(mp3))
    assert said.exit_code == 0 and "audio/mpeg" in said.output
    assert mp3.read_bytes()[:3] in (b"ID3", b"\xff\xfb", b"\xff\xf3")
    unknown = skulk(daemon, "say", TTS, SENTENCE, "-o", str(tmp_path / "x.wav"), "--voice", "x")
    assert unknown.exit_code == 1
    assert "unknown voice 'x'" in unknown.output
    assert not (tmp_path / "x.wav").exists()
    wrong = skulk(daemon, "transcribe", TTS, str(mp3))
    assert wrong.exit_code == 1 and "does not support transcription" in wrong.output


def test_say_without_output_writes_a_new_file_here_and_says_where(
    daemon: DaemonProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = skulk(daemon, "say", TTS, SENTENCE)
    second = skulk(daemon, "say", TTS, SENTENCE, "--format", "mp3")
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    [wav] = tmp_path.glob("say-*.wav")
    [mp3] = tmp_path.glob("say-*.mp3")
    assert wav.name in "".join(first.output.split())
    assert mp3.name in "".join(second.output.split())
    with wave.open(str(wav)) as audio:
        assert audio.getnframes() > 0


def test_voices_lists_every_placed_tts_model(daemon: DaemonProcess) -> None:
    listed = skulk(daemon, "voices")
    assert listed.exit_code == 0, listed.output
    assert "joe" in listed.output and TTS in listed.output and "en-US" in listed.output
    as_json = skulk(daemon, "voices", TTS, "--json")
    assert as_json.exit_code == 0
    assert '"id": "joe"' in as_json.output


# -- the built-in providers ----------------------------------------------------------


def relay(
    daemon: DaemonProcess,
    capability: str,
    payload: dict[str, Any],
    chunks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One tts/stt stream through the relay extension: its open result and frames."""
    descriptor = TTS_DESCRIPTOR if capability == "tts" else STT_DESCRIPTOR
    envelope = {
        "call_id": uuid.uuid4().hex,
        "capability_id": "stream-relay",
        "version": "1.0.0",
        "descriptor_revision": relay_revision(daemon),
        "caller_node": "tests",
        "target_node": node_id(daemon),
        "timeout_seconds": 90,
        "payload": {
            "capability_id": capability,
            "version": "1.0.0",
            "revision": descriptor_revision(descriptor),
            "payload": payload,
            "chunks": chunks or [],
            "timeout": 60,
        },
    }
    response = httpx.post(f"{daemon.url}/v1/capabilities/call", json=envelope, timeout=120)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["ok"], body
    result: dict[str, Any] = body["result"]
    return result


def clip_chunks(audio: bytes, size: int = 64 * 1024) -> list[dict[str, Any]]:
    return [
        {
            "payload": None,
            "media": {
                "data_b64": base64.b64encode(audio[i : i + size]).decode(),
                "media_type": "audio/wav",
            },
        }
        for i in range(0, len(audio), size)
    ]


def test_the_node_describes_and_advertises_both_providers(daemon: DaemonProcess) -> None:
    found = descriptors(daemon)
    assert found["tts@1.0.0"]["io_mode"] == "server_streaming"
    assert found["stt@1.0.0"]["io_mode"] == "client_streaming"
    assert found["tts@1.0.0"]["input_schema"]["required"] == ["model", "text"]
    me = node_id(daemon)
    deadline = time.monotonic() + 30
    tags: list[str] = []
    while time.monotonic() < deadline:
        tags = httpx.get(f"{daemon.url}/state", timeout=10).json()["nodeCapabilities"].get(me, [])
        if {"tts", "stt"} <= set(tags):
            break
        time.sleep(0.5)
    assert {"tts", "stt"} <= set(tags)


def test_tts_streams_mp3_chunks_and_stt_hears_them_back(daemon: DaemonProcess) -> None:
    spoken = relay(daemon, "tts", {"model": TTS, "text": "One small step. Another step."})
    assert spoken["open"]["ok"], spoken["open"]
    frames = spoken["frames"]
    assert frames[0]["kind"] == "started" and frames[-1]["kind"] == "completed"
    chunks = frames[1:-1]
    assert len(chunks) >= 2 and all(f["kind"] == "chunk" for f in chunks)
    assert [f["payload"]["chunk_index"] for f in chunks] == list(range(len(chunks)))
    assert all(f["payload"]["format"] == "mp3" for f in chunks)
    assert [f["payload"]["is_partial"] for f in chunks][-1] is False
    assert sum(f["media_bytes"] for f in chunks) > 1000
    assert frames[-1]["payload"] == {"model": TTS, "chunks": len(chunks)}

    wav = httpx.post(
        f"{daemon.url}/v1/audio/speech",
        json={"model": TTS, "input": SENTENCE, "response_format": "wav", "seed": 7},
        timeout=60,
    ).content
    heard = relay(daemon, "stt", {"model": STT, "filename": "speech.wav"}, clip_chunks(wav))
    assert heard["open"]["ok"], heard["open"]
    last = heard["frames"][-1]
    assert last["kind"] == "completed", heard["frames"]
    assert last["payload"]["model"] == STT and last["payload"]["language"] == "en"
    assert word_error_rate(SENTENCE, last["payload"]["text"]) == 0.0
    assert [f["kind"] for f in heard["frames"]] == ["started", "completed"]  # no partials


def test_provider_refusals(daemon: DaemonProcess) -> None:
    voice = relay(daemon, "tts", {"model": TTS, "text": "Hi.", "voice": "nobody"})
    assert not voice["open"]["ok"]
    assert voice["open"]["error"]["code"] == "invalid_payload"
    assert "unknown voice" in voice["open"]["error"]["message"]
    wrong = relay(daemon, "stt", {"model": TTS})
    assert (
        not wrong["open"]["ok"]
        and "does not support transcription" in wrong["open"]["error"]["message"]
    )
    unplaced = relay(daemon, "tts", {"model": "org/not-here", "text": "Hi."})
    assert not unplaced["open"]["ok"]
    empty = relay(daemon, "stt", {"model": STT})
    assert empty["frames"][-1]["kind"] == "failed"
    assert "no audio was sent" in empty["frames"][-1]["error"]["message"]
    garbage = relay(daemon, "stt", {"model": STT}, clip_chunks(b"not audio at all" * 64))
    assert garbage["frames"][-1]["kind"] == "failed"
    assert garbage["frames"][-1]["error"]["code"] == "invalid_payload"


# -- another node's API ------------------------------------------------------------------


@pytest.fixture(scope="module")
def peer(
    daemon: DaemonProcess, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """A second node joining the first: the speech instances stay on the first."""
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("speech-peer"),
        models_dir=shared_models_dir,
        peers=[daemon.fabric_address],
    )
    node.start()
    try:
        wait_for(lambda: converged([daemon, node], 2), "two nodes to converge", timeout=90)
        yield node
    finally:
        node.kill()


def test_another_nodes_api_routes_to_the_serving_node(
    daemon: DaemonProcess, peer: DaemonProcess
) -> None:
    # (tests/speech/test_speech_remote.py covers the remote path in full.)
    files = {"file": ("speech.wav", b"RIFF....WAVE", "audio/wav")}
    refused = httpx.post(
        f"{peer.url}/v1/audio/transcriptions", data={"model": STT}, files=files, timeout=60
    )
    # The serving node's runner refuses what is not audio, as it does locally.
    assert refused.status_code == 400, refused.text
    assert "could not be decoded as audio" in refused.json()["error"]["message"]
    speech = {"model": TTS, "input": SENTENCE, "response_format": "wav"}
    spoken = httpx.post(f"{peer.url}/v1/audio/speech", json=speech, timeout=60)
    assert spoken.status_code == 200 and spoken.content[:4] == b"RIFF"
    # The voice catalog is the card's: any node lists it, wherever the model runs.
    voices = httpx.get(f"{peer.url}/v1/audio/voices", params={"model": TTS}, timeout=10)
    assert voices.status_code == 200
    assert [voice["id"] for voice in voices.json()["data"]] == ["joe"]
