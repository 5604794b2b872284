"""Speech through Skulk against the same models run directly in-process.

Synthesis: ``POST /v1/audio/speech`` (WAV) on a daemon serving the Piper demo voice,
against the voice's ONNX model run in this process (onnxruntime with espeak-ng
phonemes, the same threads). Transcription: ``POST /v1/audio/transcriptions`` of that
speech on the Whisper tiny.en demo, against ``faster_whisper.WhisperModel`` in this
process (CPU, int8, greedy, the same threads). Each side's speed is audio seconds per
wall second (the inverse of the real-time factor); the two sides run alternately in
ABBA order and the medians are compared. Each side runs with the other quiescent
(``bench/_isolation.py``: the daemon and its runners idle while the in-process engines
run, the engines' threads idle while Skulk runs; a leak fails the run loudly).

Target: Skulk / direct >= 0.9 for both synthesis and transcription.

Run from the repository root::

    .venv/bin/python -m bench.speech [--reps 5] [--json]
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/speech.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._abba import abba, abba_parser
from bench._common import (
    LoggedDaemon,
    machine,
    median,
    place_ready,
    print_json,
    wait_for_quiet,
)
from bench._isolation import Isolation, daemon_side, in_process_side, spread, spread_text

TTS: Final = "local/piper-en-us-joe-medium"
STT: Final = "local/whisper-tiny.en"
TEXT: Final = (
    "The lighthouse keeper climbed the stairs at dusk. Rain had swept in from the west, "
    "and the sea was grey and restless. She lit the lamp, wrote the time in her log, and "
    "watched the beam sweep across the water. Far out, a small boat was turning for home."
)
TARGET: Final = 0.9


def _seconds(wav_bytes: bytes) -> float:
    with wave.open(io.BytesIO(wav_bytes)) as wav:
        return wav.getnframes() / wav.getframerate()


def _timed(work: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def main(argv: list[str] | None = None) -> int:
    parser = abba_parser(__doc__)
    args = parser.parse_args(argv)
    load = wait_for_quiet(args.max_load)
    # NOTE: imported here so `--help` stays fast; these are the engines the runners use.
    from faster_whisper import WhisperModel  # noqa: PLC0415

    from skulk_daemon.engines.piper_tts import PiperVoice  # noqa: PLC0415
    from skulk_daemon.models.sidecar import model_dir_name  # noqa: PLC0415
    from skulk_daemon.models.speech_demo import (  # noqa: PLC0415
        PIPER_MODEL_ID,
        WHISPER_MODEL_ID,
    )

    threads = os.cpu_count() or 1
    same_text: list[bool] = []
    args.models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skulk-bench-") as root:
        daemon = LoggedDaemon(root=Path(root), models_dir=args.models_dir)
        try:
            daemon.start()
            place_ready(daemon, TTS)
            place_ready(daemon, STT)
            voice = PiperVoice.open(args.models_dir / model_dir_name(PIPER_MODEL_ID), threads)
            whisper = WhisperModel(
                str(args.models_dir / model_dir_name(WHISPER_MODEL_ID)),
                device="cpu",
                compute_type="int8",
                cpu_threads=threads,
            )
            voice.synthesize("Warm up.")
            isolation = Isolation(
                [daemon_side("skulk", daemon.process), in_process_side("direct")], gap_s=args.gap
            )
            with httpx.Client(base_url=daemon.url, timeout=600) as client:

                def tts_skulk() -> float:
                    spent, response = _timed(
                        lambda: client.post(
                            "/v1/audio/speech",
                            json={"model": TTS, "input": TEXT, "response_format": "wav"},
                        )
                    )
                    response.raise_for_status()
                    return _seconds(response.content) / spent

                def tts_direct() -> float:
                    spent, (pcm, _) = _timed(lambda: voice.synthesize(TEXT))
                    return len(pcm) / 2 / voice.sample_rate / spent

                reference = client.post(
                    "/v1/audio/speech", json={"model": TTS, "input": TEXT, "response_format": "wav"}
                ).content
                audio_seconds = _seconds(reference)
                texts: dict[str, str] = {}

                def stt_skulk() -> float:
                    spent, response = _timed(
                        lambda: client.post(
                            "/v1/audio/transcriptions",
                            data={"model": STT, "response_format": "json"},
                            files={"file": ("speech.wav", reference, "audio/wav")},
                        )
                    )
                    response.raise_for_status()
                    texts["skulk"] = response.json()["text"]
                    return audio_seconds / spent

                def stt_direct() -> float:
                    def run() -> str:
                        segments, _ = whisper.transcribe(
                            io.BytesIO(reference),
                            beam_size=1,
                            temperature=0.0,
                            condition_on_previous_text=False,
                        )
                        return " ".join(s.text.strip() for s in segments)

                    spent, texts["direct"] = _timed(run)
                    return audio_seconds / spent

                speeds = abba(
                    {
                        "tts": {"skulk": tts_skulk, "direct": tts_direct},
                        "stt": {"skulk": stt_skulk, "direct": stt_direct},
                    },
                    isolation=isolation,
                    warmup=args.warmup,
                    reps=args.reps,
                    after=lambda: same_text.append(texts["skulk"] == texts["direct"]),
                )
        finally:
            daemon.kill()
    m = {name: median(values) for name, values in speeds.items()}
    tts_ratio = m["tts_skulk"] / m["tts_direct"]
    stt_ratio = m["stt_skulk"] / m["stt_direct"]
    result: dict[str, Any] = {
        "benchmark": "speech",
        "machine": machine(),
        "load_at_start": round(load, 2),
        "audio_seconds": round(audio_seconds, 2),
        **{f"{name}_audio_s_per_s": round(value, 2) for name, value in m.items()},
        "tts_ratio": round(tts_ratio, 4),
        "stt_ratio": round(stt_ratio, 4),
        "target": TARGET,
        "tts_ok": tts_ratio >= TARGET,
        "stt_ok": stt_ratio >= TARGET,
        "same_transcript": all(same_text),
        "all": {name: [round(v, 2) for v in values] for name, values in speeds.items()},
        "spread": {name: spread(values) for name, values in speeds.items()},
        "isolation": isolation.report(),
    }
    print(
        f"{audio_seconds:.1f} s of speech. Synthesis (audio s per s): Skulk {m['tts_skulk']:.2f}, "
        f"direct {m['tts_direct']:.2f}, ratio {tts_ratio:.3f}x. Transcription: Skulk "
        f"{m['stt_skulk']:.2f}, direct {m['stt_direct']:.2f}, ratio {stt_ratio:.3f}x "
        f"(target >= {TARGET}); same transcript on both sides: {all(same_text)}"
    )
    for name, values in speeds.items():
        print(f"  {name}: {spread_text(values)} audio s per s (median, p90, min-max)")
    if args.json:
        print_json(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
