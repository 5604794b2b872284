"""Speech from placed ``TextToSpeech``/``SpeechToText`` models: admission, the runner, the answer.

Everything the spec refuses is refused here before a runner sees the request: 400 for
bad input, for a model that lacks the task or the card flag a request needs, for an
unknown voice or an undeclared format; 404 for a model with no instance; 413 for an
upload over 25 MiB. The audio and text travel only to the runner (over its pipe);
``/state`` shows the task, never its content. ``POST /v1/cancel/{command_id}`` or a
client that disconnects cancels the work between sentences or segments.

Any node's API serves any placed speech model: when no runner of the model is on this
node, the task goes to the node that serves it over the fabric
(:mod:`skulk_daemon.fabric.remote_speech`), and its answer comes back the same way; a
node without a fabric refuses such a request with 503.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from skulk_core.audio.formats import (
    DEFAULT_SPEECH_FORMAT,
    MAX_AUDIO_UPLOAD_BYTES,
    MAX_SPEECH_INPUT_CHARS,
    SPEECH_FORMATS,
    SPEECH_MEDIA_TYPES,
    STREAMING_SPEECH_FORMATS,
    TRANSCRIPT_FORMATS,
    TRANSCRIPT_MEDIA_TYPES,
    SpeechFormat,
    TranscriptFormat,
    pcm_headers,
)
from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.routing import select_instance
from skulk_core.ids import (
    CommandId,
    InstanceId,
    ModelId,
    NodeId,
    TaskId,
    new_command_id,
    new_task_id,
)
from skulk_core.models.cards import AudioCard, ModelCard, ModelTask
from skulk_core.models.listing import reference_audio_note
from skulk_core.state.shards import Instance, RunnerReady, RunnerRunning, serving_node
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.embeddings.service import refusal
from skulk_daemon.errors import ApiError
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.node.node import Node
from skulk_daemon.runner.client import Answer, PartSink
from skulk_daemon.runner.protocol import (
    SpeechPartial,
    SpeechTask,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
)
from skulk_daemon.runner.remote import RemoteRunner
from skulk_daemon.speech.encode import encode_pcm
from skulk_daemon.speech.protocol import (
    SpeechRequest,
    Voice,
    VoiceList,
)
from skulk_daemon.speech.transcripts import render_transcript
from skulk_daemon.worker.supervisor import Supervisor

MAX_SEED: Final = 2**32 - 1
REMOTE_FAILURES: Final = frozenset({"node_lost", "stream_broken", "audio_mismatch"})
"""How a task on another node's runner fails on the way (503: retry)."""


@dataclass(frozen=True, slots=True)
class AdmittedSpeech:
    command_id: CommandId
    instance_id: InstanceId
    task: Synthesize
    response_format: SpeechFormat
    sample_rate: int | None = None
    """The card's declared output rate (a streamed response's headers need it)."""


@dataclass(frozen=True, slots=True)
class TranscriptionForm:
    """A transcription or translation upload, as the route read it."""

    model: str
    audio: bytes
    language: str | None = None
    prompt: str | None = None
    response_format: str | None = None
    temperature: float | None = None
    stream: bool = False


@dataclass(frozen=True, slots=True)
class AdmittedTranscription:
    command_id: CommandId
    instance_id: InstanceId
    task: Transcribe
    response_format: TranscriptFormat


@dataclass(frozen=True, slots=True)
class SpeechBody:
    """An answer ready to send: the bytes, their media type and extra headers."""

    content: bytes
    media_type: str
    headers: dict[str, str]


class SpeechService:
    """Admission and dispatch of speech requests on this node."""

    def __init__(
        self,
        node: Node,
        worker: Supervisor,
        commands: ActiveCommands,
        *,
        remote: RemoteRunner[SpeechTask, SpeechPartial] | None = None,
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands
        self._remote = remote

    # -- admission --------------------------------------------------------------

    def _card(
        self, model: str, task: ModelTask, what: str, *, here: bool = True
    ) -> tuple[ModelCard, InstanceId]:
        """The model's card and the instance to use (one this node serves first); 400
        if it lacks ``task``, 404 if the catalog has no such model or no instance serves
        it, 503 (with ``here``) if the instance is elsewhere and this node has no fabric
        to reach it."""
        if not model:
            raise _bad("model is required")
        model_id = ModelId(model)
        entry = self._node.catalog().get(model_id)
        if entry is not None and task not in entry.card.tasks:
            raise _bad(f"model {model} does not support {what} ({task.value})", code="wrong_task")
        instance = select_instance(self._node.state, model_id)
        if entry is None or instance is None:
            raise ApiError(404, f"No instance found for model {model}", code="model_not_found")
        host = serving_node(instance)
        if here and host != self._node.node_id:
            local = self._local_instance(model_id)
            if local is not None:
                return entry.card, local
        if here and host != self._node.node_id and self._remote is None:
            raise ApiError(
                503,
                f"model {model} is served by node {host}, and this node has no fabric to "
                "reach it; send the request to that node's API",
                code="instance_unavailable",
            )
        return entry.card, instance.instance_id

    def _local_instance(self, model_id: ModelId) -> InstanceId | None:
        """An instance of ``model_id`` this node's runner serves, ready ones first."""
        state = self._node.state
        local = [
            instance
            for instance in state.instances.values()
            if instance.shard_assignments.model_id == model_id
            and serving_node(instance) == self._node.node_id
        ]

        def ready(instance: Instance) -> bool:
            return all(
                isinstance(state.runners.get(runner), RunnerReady | RunnerRunning)
                for runner in instance.shard_assignments.runner_to_shard
            )

        local.sort(key=lambda instance: (not ready(instance), instance.instance_id))
        return local[0].instance_id if local else None

    def admit_speech(self, body: SpeechRequest) -> AdmittedSpeech:
        if body.reference_audio is not None:
            raise _bad(
                "reference_audio must be a multipart file upload; server-local paths and "
                "JSON values are not accepted"
            )
        if body.reference_text is not None:
            raise _bad("reference_text is accepted only with a multipart reference_audio upload")
        if body.streaming_interval is not None and not body.stream:
            raise _bad("streaming_interval is accepted only with stream=true")
        if body.streaming_interval is not None and body.streaming_interval <= 0:
            raise _bad("streaming_interval must be positive")
        if not body.input.strip():
            raise _bad("input must not be empty")
        if len(body.input) > MAX_SPEECH_INPUT_CHARS:
            raise _bad(
                f"input holds {len(body.input)} characters; at most "
                f"{MAX_SPEECH_INPUT_CHARS} are allowed"
            )
        if body.speed is not None and not body.speed > 0:
            raise _bad(f"speed must be a positive number, got {body.speed}")
        if body.seed is not None and not 0 <= body.seed <= MAX_SEED:
            raise _bad("seed must be an unsigned 32-bit integer")
        if body.max_tokens is not None and body.max_tokens < 1:
            raise _bad("max_tokens must be positive")
        card, instance_id = self._card(body.model, ModelTask.TEXT_TO_SPEECH, "speech synthesis")
        audio = card.audio or AudioCard(kind="tts")
        voice = _voice(body, audio)
        fmt = _speech_format(body, audio)
        if body.stream:
            if not audio.supports_streaming:
                raise _bad(
                    f"model {body.model} does not declare streaming speech "
                    "(audio.supports_streaming); send stream=false",
                    code="streaming_not_supported",
                )
            if fmt not in STREAMING_SPEECH_FORMATS:
                raise _bad("streaming speech is available as mp3 or pcm only")
            if not audio.sample_rates:
                raise _bad(f"model {body.model} declares no output sample rate to stream at")
            self.ready_everywhere(body.model)
        return AdmittedSpeech(
            command_id=new_command_id(),
            instance_id=instance_id,
            task=Synthesize(
                task_id=new_task_id(),
                text=body.input,
                voice=voice,
                speed=body.speed or 1.0,
                seed=body.seed,
                stream=body.stream,
            ),
            response_format=fmt,
            sample_rate=audio.sample_rates[0] if audio.sample_rates else None,
        )

    def refuse_reference_audio(self, model: str, *, voice: bool, upload: bool) -> ApiError:
        """Why a multipart speech request (the reference-audio form) is refused: 404/400
        for the model as for JSON, 400 unless its card declares reference audio, 400
        without the upload or with a voice; and, since no speech engine here conditions
        on reference audio, 400 for a card that declares it too."""
        card, _ = self._card(model, ModelTask.TEXT_TO_SPEECH, "speech synthesis", here=False)
        if card.audio is None or not card.audio.supports_reference_audio:
            note = reference_audio_note(card)
            why = f": {note}" if note else ""
            return _bad(
                f"model {model} does not declare reference audio "
                f"(audio.supports_reference_audio){why}; send JSON without reference_audio",
                code="reference_audio_not_supported",
            )
        if not upload:
            return _bad("a multipart speech request must upload reference_audio as a file")
        if voice:
            return _bad("a reference_audio upload cannot be combined with voice")
        return _bad(
            f"model {model} declares reference audio, but no speech engine on this node "
            "conditions on it; send JSON without reference_audio",
            code="reference_audio_not_supported",
        )

    def admit_transcription(
        self, form: TranscriptionForm, *, translate: bool
    ) -> AdmittedTranscription:
        fmt = form.response_format or "json"
        if fmt not in TRANSCRIPT_FORMATS:
            raise _bad(
                f"response_format must be one of {', '.join(TRANSCRIPT_FORMATS)}, got {fmt!r}"
            )
        if len(form.audio) > MAX_AUDIO_UPLOAD_BYTES:
            raise ApiError(
                413,
                f"the audio upload holds {len(form.audio)} bytes; at most "
                f"{MAX_AUDIO_UPLOAD_BYTES} (25 MiB) are accepted",
                code="upload_too_large",
            )
        if not form.audio:
            raise _bad("file is empty")
        if form.temperature is not None and not 0.0 <= form.temperature <= 1.0:
            raise _bad(f"temperature must be between 0 and 1, got {form.temperature}")
        what = "speech translation" if translate else "transcription"
        card, instance_id = self._card(form.model, ModelTask.SPEECH_TO_TEXT, what)
        audio = card.audio or AudioCard(kind="stt")
        if translate and not audio.supports_translation:
            raise _bad(
                f"model {form.model} does not declare speech translation "
                "(audio.supports_translation)",
                code="translation_not_supported",
            )
        if form.stream and not audio.supports_streaming:
            raise _bad(
                f"model {form.model} does not declare streaming transcription "
                "(audio.supports_streaming); send stream=false",
                code="streaming_not_supported",
            )
        if form.stream and form.response_format not in (None, "json", "ndjson"):
            raise _bad(
                "stream=true answers with typed SSE events (or ndjson with "
                "response_format=ndjson); send stream=false for other formats"
            )
        if form.stream:
            self.ready_everywhere(form.model)
        narrowed = next(known for known in TRANSCRIPT_FORMATS if known == fmt)
        return AdmittedTranscription(
            command_id=new_command_id(),
            instance_id=instance_id,
            task=Transcribe(
                task_id=new_task_id(),
                audio=form.audio,
                language=form.language or None,
                prompt=form.prompt or None,
                temperature=form.temperature,
                translate=translate,
                stream=form.stream,
            ),
            response_format=narrowed,
        )

    def voices(self, model: str | None) -> VoiceList:
        if not model:
            raise _bad("the model query parameter is required")
        # The catalog is the card's: any node's API lists it, wherever the model runs.
        card, _ = self._card(model, ModelTask.TEXT_TO_SPEECH, "speech synthesis", here=False)
        audio = card.audio
        if audio is None or not audio.supports_voice_listing:
            raise _bad(
                f"model {model} does not declare voice listing (audio.supports_voice_listing)",
                code="voice_listing_not_supported",
            )
        return VoiceList(
            data=[
                Voice(
                    id=voice.id,
                    name=voice.name,
                    model=model,
                    kind=voice.kind,
                    preferred_languages=list(voice.preferred_languages) or None,
                )
                for voice in audio.voices
            ]
        )

    # -- dispatch ---------------------------------------------------------------

    async def run(
        self,
        command_id: CommandId,
        instance_id: InstanceId,
        task: Synthesize | Transcribe,
        parts: PartSink = None,
    ) -> Answer:
        """The task on the instance's runner (this node's, or the serving node's over
        the fabric), cancellable by command id while it runs."""
        worker = self._worker
        task_id: TaskId = task.task_id
        host = self._remote_host(instance_id)
        remote = self._remote
        if host is not None and remote is not None:
            with self._commands.running(command_id, lambda: remote.cancel(host, command_id)):
                return await remote.run(host, instance_id, task, command_id, parts)
        with self._commands.running(command_id, lambda: worker.cancel(instance_id, task_id)):
            return await worker.speech(instance_id, task, command_id, parts)

    def _remote_host(self, instance_id: InstanceId) -> NodeId | None:
        """The node serving ``instance_id`` when that is not this one."""
        instance = self._node.state.instances.get(instance_id)
        host = None if instance is None else serving_node(instance)
        return None if host is None or host == self._node.node_id else host

    async def stream(
        self, command_id: CommandId, instance_id: InstanceId, task: Synthesize | Transcribe
    ) -> AsyncIterator[SpeechPartial | Answer]:
        """A streamed task's parts in order, then its answer. Leaving early (the client
        went away) cancels the task on the runner."""
        queue: asyncio.Queue[SpeechPartial | Answer] = asyncio.Queue()
        job = asyncio.create_task(self.run(command_id, instance_id, task, queue.put_nowait))

        def ended(done: asyncio.Task[Answer]) -> None:
            if done.cancelled():
                return
            failure = done.exception()
            queue.put_nowait(
                done.result()
                if failure is None
                else ErrorChunk(task_id=task.task_id, code="engine_failed", message=str(failure))
            )

        job.add_done_callback(ended)
        try:
            while True:
                item = await queue.get()
                yield item
                if not isinstance(item, SpeechPartial):
                    return
        finally:
            if not job.done():
                job.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await job

    def ready_everywhere(self, model: str) -> None:
        """503 unless every instance of ``model`` has all its runners ready (what a
        streamed response needs before its headers go out)."""
        state = self._node.state
        for instance in state.instances.values():
            assignments = instance.shard_assignments
            if assignments.model_id != ModelId(model):
                continue
            for runner_id in assignments.runner_to_shard:
                if not isinstance(state.runners.get(runner_id), RunnerReady | RunnerRunning):
                    raise ApiError(
                        503,
                        f"an instance of {model} has no ready runner yet; retry once it is "
                        "ready, or send stream=false",
                        code="instance_unavailable",
                    )

    async def speech_body(self, admitted: AdmittedSpeech, result: Answer) -> SpeechBody:
        if isinstance(result, ErrorChunk):
            raise _refusal(result)
        if not isinstance(result, Synthesized):
            raise ApiError(500, "the runner answered out of kind", code="engine_failed")
        fmt = admitted.response_format
        content = await asyncio.to_thread(encode_pcm, result.pcm, result.sample_rate, fmt)
        headers = {"X-Skulk-Command-Id": str(admitted.command_id)}
        if fmt == "pcm":
            headers.update(pcm_headers(result.sample_rate))
        return SpeechBody(content=content, media_type=SPEECH_MEDIA_TYPES[fmt], headers=headers)

    @staticmethod
    def transcript_body(admitted: AdmittedTranscription, result: Answer) -> SpeechBody:
        if isinstance(result, ErrorChunk):
            raise _refusal(result)
        if not isinstance(result, Transcribed):
            raise ApiError(500, "the runner answered out of kind", code="engine_failed")
        fmt = admitted.response_format
        headers = {"X-Skulk-Command-Id": str(admitted.command_id)}
        return SpeechBody(
            content=render_transcript(result, fmt, translate=admitted.task.translate),
            media_type=TRANSCRIPT_MEDIA_TYPES[fmt],
            headers=headers,
        )


def _refusal(answer: ErrorChunk) -> ApiError:
    """The runner's refusal as a client sees it; a failure on the way to another
    node's runner is a 503 (retry), under its own code."""
    if answer.code in REMOTE_FAILURES:
        return ApiError(503, answer.message, code=answer.code)
    return refusal(answer.code, answer.message)


def _voice(body: SpeechRequest, audio: AudioCard) -> str | None:
    if body.voice is None:
        return audio.default_voice
    if not audio.voices:
        raise _bad(
            f"model {body.model} declares no voice catalog; omit voice",
            code="voice_not_supported",
        )
    known = [voice.id for voice in audio.voices]
    if body.voice not in known:
        raise _bad(
            f"unknown voice {body.voice!r} for model {body.model}; known voices: "
            + ", ".join(known),
            code="unknown_voice",
        )
    return body.voice


def _speech_format(body: SpeechRequest, audio: AudioCard) -> SpeechFormat:
    requested = body.response_format
    if requested is None:
        requested = (
            DEFAULT_SPEECH_FORMAT
            if body.stream
            else (audio.default_response_format or DEFAULT_SPEECH_FORMAT)
        )
    for fmt in SPEECH_FORMATS:
        if fmt == requested:
            if audio.response_formats and fmt not in audio.response_formats:
                raise _bad(
                    f"model {body.model} does not produce {fmt}; it offers "
                    + ", ".join(audio.response_formats)
                )
            return fmt
    raise _bad(f"response_format must be one of {', '.join(SPEECH_FORMATS)}, got {requested!r}")
