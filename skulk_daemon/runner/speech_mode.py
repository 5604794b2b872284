"""The runner's ``"speak"`` and ``"transcribe"`` modes: one speech engine, one task at a time.

The host (:mod:`skulk_daemon.runner.host`) hands the runner over here after ``Load``.
The engine is loaded and warmed (reporting each phase), then one worker thread
answers every :class:`~skulk_daemon.runner.protocol.Synthesize` or
:class:`~skulk_daemon.runner.protocol.Transcribe` in arrival order with exactly one
``Synthesized``/``Transcribed`` or ``ErrorChunk``. ``Cancel`` marks a task: a queued one
is answered ``cancelled`` when its turn comes, a running one stops at its engine's
next sentence or segment. Audio and text never reach the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final, Protocol

import numpy as np

from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.chat.generation import ERROR_ENGINE_FAILED, ERROR_INVALID_REQUEST, ErrorChunk
from skulk_core.ids import TaskId
from skulk_daemon.engines.base import EngineLoadError
from skulk_daemon.runner.protocol import (
    ERROR_CANCELLED,
    Failed,
    Load,
    Phase,
    RunnerMessage,
    RunnerSpeechTask,
    SpeechPartial,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
    TranscribeRealtime,
    serve_frames,
)
from skulk_daemon.runner.realtime import RealtimeInlets
from skulk_daemon.runner.serial_worker import SerialWorker

log = logging.getLogger("skulk.runner")
WARM_UP_SAMPLES: Final = 16_000

EXIT_FAILED: Final = 1
Send = Callable[[RunnerMessage], None]


class Cancelled(Exception):
    """Raised by a speech backend when its task was cancelled mid-way."""


class Refused(ValueError):
    """Raised by a speech backend for input it cannot serve (a 400 for the client)."""


Partial = Callable[[bytes, TranscriptSegment | None], None]
"""Where a streamed task's parts go: a sentence's PCM, or a decoded segment."""


class SpeechBackend(Protocol):
    def warm_up(self) -> None: ...
    def run(
        self, task: RunnerSpeechTask, cancelled: Callable[[], bool], partial: Partial
    ) -> RunnerMessage: ...


class _Speaker:
    def __init__(self, model_dir: Path, n_threads: int | None) -> None:
        from skulk_daemon.engines.piper_tts import PiperVoice  # noqa: PLC0415 (lazy engine)

        self._voice = PiperVoice.open(model_dir, n_threads)

    def warm_up(self) -> None:
        from skulk_daemon.engines.piper_tts import WARM_UP_TEXT  # noqa: PLC0415

        self._voice.synthesize(WARM_UP_TEXT)

    def run(
        self, task: RunnerSpeechTask, cancelled: Callable[[], bool], partial: Partial
    ) -> RunnerMessage:
        from skulk_daemon.engines.piper_tts import (  # noqa: PLC0415
            SynthesisCancelled,
            SynthesisRefused,
        )

        if not isinstance(task, Synthesize):
            raise Refused("this runner synthesizes speech; it does not transcribe")
        try:
            pcm, sentences = self._voice.synthesize(
                task.text,
                task.speed,
                cancelled,
                (lambda pcm: partial(pcm, None)) if task.stream else None,
                deterministic=task.seed is not None,
            )
        except SynthesisCancelled:
            raise Cancelled from None
        except SynthesisRefused as exc:
            raise Refused(str(exc)) from None
        return Synthesized(
            task_id=task.task_id, pcm=pcm, sample_rate=self._voice.sample_rate, sentences=sentences
        )


class _Transcriber:
    def __init__(self, model_dir: Path, n_threads: int | None, inlets: RealtimeInlets) -> None:
        from skulk_daemon.engines.whisper_stt import WhisperTranscriber  # noqa: PLC0415

        self._model = WhisperTranscriber.open(model_dir, n_threads)
        self._inlets = inlets

    def warm_up(self) -> None:
        self._model.warm_up()
        # The streaming path decodes with word timestamps: warm that too, so a first
        # realtime turn does not pay for it.
        silence = np.zeros(WARM_UP_SAMPLES, dtype=np.float32)
        session = self._model.create_streaming_session()
        session.push(silence)
        session.finish()

    def run(
        self, task: RunnerSpeechTask, cancelled: Callable[[], bool], partial: Partial
    ) -> RunnerMessage:
        from skulk_daemon.engines.whisper_stt import (  # noqa: PLC0415
            TranscriptionCancelled,
            TranscriptionRefused,
        )

        if isinstance(task, TranscribeRealtime):
            return self._realtime(task, cancelled, partial)
        if not isinstance(task, Transcribe):
            raise Refused("this runner transcribes speech; it does not synthesize")
        try:
            transcript = self._model.transcribe(
                task.audio,
                language=task.language,
                prompt=task.prompt,
                temperature=task.temperature,
                translate=task.translate,
                cancelled=cancelled,
                on_segment=(lambda segment: partial(b"", segment)) if task.stream else None,
            )
        except TranscriptionCancelled:
            raise Cancelled from None
        except TranscriptionRefused as exc:
            raise Refused(str(exc)) from None
        return Transcribed(
            task_id=task.task_id,
            text=transcript.text,
            language=transcript.language,
            duration=transcript.duration,
            segments=transcript.segments,
        )

    def _realtime(
        self, task: TranscribeRealtime, cancelled: Callable[[], bool], partial: Partial
    ) -> RunnerMessage:
        from skulk_daemon.engines.whisper_streaming import (  # noqa: PLC0415
            StreamingCancelled,
        )
        from skulk_daemon.runner.realtime import (  # noqa: PLC0415
            InletCancelled,
            RealtimeRefused,
            run_realtime,
        )

        try:
            return run_realtime(
                self._model,
                task,
                self._inlets,
                cancelled,
                lambda segment: partial(b"", segment),
            )
        except (InletCancelled, StreamingCancelled):
            raise Cancelled from None
        except RealtimeRefused as exc:
            raise Refused(str(exc)) from None


class SpeechWorker(SerialWorker[RunnerSpeechTask]):
    """One thread serving a backend's tasks in order, each answered exactly once; a
    cancel also wakes a realtime task waiting for audio."""

    def __init__(
        self, backend: SpeechBackend, send: Send, inlets: RealtimeInlets | None = None
    ) -> None:
        # NOTE: set before the base starts the thread that reads them.
        self._backend = backend
        self._inlets = inlets
        super().__init__(send, "speech")

    def cancel(self, task_id: TaskId) -> None:
        super().cancel(task_id)
        if self._inlets is not None:
            self._inlets.wake(task_id)

    def _finished(self, task: RunnerSpeechTask) -> None:
        if self._inlets is not None and isinstance(task, TranscribeRealtime):
            self._inlets.forget(task.task_id)

    def _partial_sender(self, task_id: TaskId) -> Partial:
        index = 0

        def send(pcm: bytes, segment: TranscriptSegment | None) -> None:
            nonlocal index
            self._send(SpeechPartial(task_id=task_id, index=index, pcm=pcm, segment=segment))
            index += 1

        return send

    def _answer(self, task: RunnerSpeechTask) -> RunnerMessage:
        task_id = task.task_id
        if self._is_cancelled(task_id):
            return _error(task_id, ERROR_CANCELLED, "the speech request was cancelled")
        try:
            return self._backend.run(
                task, lambda: self._is_cancelled(task_id), self._partial_sender(task_id)
            )
        except Cancelled:
            return _error(task_id, ERROR_CANCELLED, "the speech request was cancelled")
        except Refused as exc:
            return _error(task_id, ERROR_INVALID_REQUEST, str(exc))
        except Exception as exc:
            log.exception("speech task %s failed", task_id)
            return _error(task_id, ERROR_ENGINE_FAILED, f"the speech engine failed: {exc}")


def _error(task_id: TaskId, code: str, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=code, message=message)


def _open(load: Load, inlets: RealtimeInlets) -> SpeechBackend:
    model_dir = Path(load.model_path)
    if load.mode == "speak":
        return _Speaker(model_dir, load.n_threads)
    return _Transcriber(model_dir, load.n_threads, inlets)


def serve_speech(stdin: BinaryIO, send: Send, load: Load) -> int:
    """Load the speech engine ``load`` names, then serve its tasks until Shutdown."""
    inlets = RealtimeInlets()
    try:
        backend = _open(load, inlets)
        send(Phase(phase="loaded"))
        send(Phase(phase="warming_up"))
        backend.warm_up()
    except (ImportError, OSError, EngineLoadError, ValueError) as exc:
        log.error("cannot load: %s", exc)
        send(Failed(message=str(exc)))
        return EXIT_FAILED
    send(Phase(phase="ready"))
    worker = SpeechWorker(backend, send, inlets)
    what = "serves speech, not text generation or embeddings"
    serve_frames(
        stdin,
        generate=lambda request: send(_error(request.task_id, ERROR_INVALID_REQUEST, what)),
        embed=lambda task_id, _: send(_error(task_id, ERROR_INVALID_REQUEST, what)),
        cancel=worker.cancel,
        speech=worker.submit,
        audio=inlets.feed,
        images=lambda task: send(_error(task.task_id, ERROR_INVALID_REQUEST, "renders no images")),
    )
    send(Phase(phase="shutting_down"))
    worker.stop()
    send(Phase(phase="shutdown"))
    return 0
