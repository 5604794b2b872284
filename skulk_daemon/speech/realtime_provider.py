"""The built-in ``stt.realtime@1.0.0`` provider: realtime PCM in, transcript deltas out.

A bidirectional capability over a mounted STT model whose card declares
``audio.supports_realtime`` (true only where the engine exposes a true
``create_streaming_session``). Open with ``model``, ``sample_rate`` (8000-96000 Hz),
optional ``temperature`` and ``transcription_delay_ms`` (80-2400 in 80 ms steps,
default 480); then send ordered chunks whose inline media is mono ``pcm_s16le`` at that
rate and whose payload says the same (``format``, ``sample_rate``, ``channels: 1``);
``complete()`` half-closes the audio and the final decode finishes.

Admission pins one ``TranscribeRealtime`` task to a ready, single-host instance served
by this node's runner and reserves it (one realtime call per instance at a time). Each
chunk is resampled to 16 kHz and forwarded to the runner as a bounded
``RealtimeAudio`` packet over its pipe as it arrives: audio never enters State or the
event log. Output chunks are ``{model, text, is_partial: true}`` deltas, as the runner
confirms them; ``completed`` is ``{model, text, is_partial: false}`` with the
accumulated text, sent only once ``/state`` shows the task finished. A caller that
goes away cancels the runner's task.

Capacity anywhere counts, when it is reachable: the descriptor is ready (and the
``stt.realtime`` tag advertised) while this node runs a ready realtime-capable
instance, or while a peer heard from over the fabric serves one and advertises the
tag (:mod:`skulk_daemon.speech.realtime_route`). A call this node cannot serve itself
is relayed to that peer (:mod:`skulk_daemon.speech.realtime_relay`); same-node input
short-circuits locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

from skulk_core.audio.realtime_events import MAX_TRANSCRIPT_BYTES
from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.worker_plan import LocalRunnerPhase
from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityStreamFrame,
    InlineMediaAttachment,
    JsonObject,
)
from skulk_core.ids import InstanceId, NodeId, TaskId, new_command_id, new_task_id
from skulk_core.state.state import TaskStatus
from skulk_daemon.capabilities.frames import OutputFrames
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.node.node import Node
from skulk_daemon.runner.client import Answer
from skulk_daemon.runner.protocol import (
    RealtimeAudio,
    SpeechPartial,
    Transcribed,
    TranscribeRealtime,
)
from skulk_daemon.speech.providers import MAX_FRAME_MEDIA_BYTES
from skulk_daemon.speech.realtime_capacity import RealtimeCapacity
from skulk_daemon.speech.realtime_capacity import realtime_error as _error
from skulk_daemon.speech.realtime_pacing import InputStalled, paced
from skulk_daemon.speech.realtime_relay import relay
from skulk_daemon.speech.realtime_route import remote_candidates
from skulk_daemon.worker.supervisor import Supervisor

log = logging.getLogger(__name__)

REALTIME_ID: Final = "stt.realtime"
VERSION: Final = "1.0.0"
CODEC: Final = "pcm_s16le"
MEDIA_TYPE: Final = "audio/pcm"
RUNNER_RATE: Final = 16_000
SAMPLE_RATE_RANGE: Final = (8000, 96000)
DELAY_MS_RANGE: Final = (80, 2400)
DELAY_STEP_MS: Final = 80
DEFAULT_DELAY_MS: Final = 480
MAX_CALL_AUDIO_BYTES: Final = 64 * 1024 * 1024
"""Decoded audio one call may carry (the realtime session's bound)."""
STATE_WAIT_SECONDS: Final = 5.0
"""How long the terminal waits for ``/state`` to show the task finished."""

_TEXT: Final[JsonObject] = {"type": "string"}

REALTIME_DESCRIPTOR: Final = CapabilityDescriptor(
    id=REALTIME_ID,
    version=VERSION,
    title="Realtime speech to text (mounted streaming models)",
    description=(
        "Transcribes live PCM as it arrives with a mounted speech-to-text model that "
        "declares realtime support. Open with {'model', 'sample_rate': 8000..96000} plus "
        "optional temperature and transcription_delay_ms (80..2400, steps of 80); send "
        "chunks with inline audio/pcm media (codec pcm_s16le, that rate, 1 channel) whose "
        "payload is {'format': 'pcm_s16le', 'sample_rate', 'channels': 1}; complete the "
        "input to finish. Output chunks {'model', 'text', 'is_partial': true} are "
        "confirmed transcript deltas; completed is {'model', 'text', 'is_partial': false}."
    ),
    input_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "sample_rate"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "sample_rate": {
                "type": "integer",
                "minimum": SAMPLE_RATE_RANGE[0],
                "maximum": SAMPLE_RATE_RANGE[1],
            },
            "temperature": {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
            "transcription_delay_ms": {
                "type": "integer",
                "minimum": DELAY_MS_RANGE[0],
                "maximum": DELAY_MS_RANGE[1],
                "multipleOf": DELAY_STEP_MS,
                "default": DEFAULT_DELAY_MS,
            },
        },
    },
    output_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "text", "is_partial"],
        "properties": {"model": _TEXT, "text": _TEXT, "is_partial": {"const": False}},
    },
    io_mode="bidirectional",
    input_chunk_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["format", "sample_rate", "channels"],
        "properties": {
            "format": {"const": CODEC},
            "sample_rate": {"type": "integer"},
            "channels": {"const": 1},
        },
    },
    output_chunk_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "text", "is_partial"],
        "properties": {"model": _TEXT, "text": _TEXT, "is_partial": {"const": True}},
    },
)


@dataclass(frozen=True, slots=True)
class RealtimeOpening:
    model: str
    sample_rate: int
    temperature: float
    delay_ms: int


def opening(payload: JsonObject) -> RealtimeOpening | CapabilityError:
    """The opening payload, checked again (the fabric validated it against the schema)."""
    model = payload.get("model")
    rate = payload.get("sample_rate")
    temperature = payload.get("temperature", 0)
    delay = payload.get("transcription_delay_ms", DEFAULT_DELAY_MS)
    if not isinstance(model, str) or not model:
        return _error("invalid_payload", "model is required")
    low, high = SAMPLE_RATE_RANGE
    if not isinstance(rate, int) or isinstance(rate, bool) or not low <= rate <= high:
        return _error("invalid_payload", f"sample_rate must be an integer from {low} to {high}")
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 1:
        return _error("invalid_payload", "temperature must be a number from 0 to 1")
    low, high = DELAY_MS_RANGE
    if (
        not isinstance(delay, int)
        or isinstance(delay, bool)
        or not low <= delay <= high
        or delay % DELAY_STEP_MS
    ):
        return _error(
            "invalid_payload",
            f"transcription_delay_ms must be from {low} to {high} in steps of {DELAY_STEP_MS}",
        )
    return RealtimeOpening(model, rate, float(temperature), delay)


def media_problem(rate: int, item: CapabilityStreamFrame) -> str | None:
    """Why a caller chunk is not mono PCM16 at the opened rate, or ``None``."""
    media = item.media
    if not isinstance(media, InlineMediaAttachment):
        return "each chunk carries its audio as inline audio/pcm media"
    if media.media_type != MEDIA_TYPE or media.codec != CODEC:
        return f"audio must be {MEDIA_TYPE} with codec {CODEC}"
    meta = item.payload or {}
    if meta.get("format") != CODEC or meta.get("channels") != 1:
        return f"each chunk's payload must say format {CODEC!r} and channels 1"
    if {media.sample_rate, meta.get("sample_rate")} != {rate}:
        return f"the payload and the media must both say the opened {rate} Hz"
    if media.channels != 1:
        return "audio must be mono (channels 1)"
    if not media.data or len(media.data) % 2:
        return "a chunk must carry a non-empty whole number of 16-bit samples"
    if len(media.data) > MAX_FRAME_MEDIA_BYTES:
        return f"a chunk carries at most {MAX_FRAME_MEDIA_BYTES} bytes of media"
    return None


@dataclass(frozen=True, slots=True)
class _Relay:
    """A call this node passes on to ``peer``'s runner."""

    peer: NodeId


class _End:
    """The input pump's outcome, when it is a failure."""

    def __init__(self, error: CapabilityError) -> None:
        self.error = error


class RealtimeSttProvider:
    """The first-party ``stt.realtime@1.0.0`` provider over this node's speech runners."""

    name = "skulk.stt.realtime"

    def __init__(
        self,
        node: Node,
        worker: Supervisor,
        commands: ActiveCommands,
        capabilities: CapabilityService | None = None,
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands
        self._fabric = capabilities
        self.capacity = RealtimeCapacity(node)

    def capabilities(self) -> list[CapabilityDescriptor]:
        return [REALTIME_DESCRIPTOR]

    def capability_ready(self, qualified_id: str) -> bool:
        # NOTE: remote capacity from State and reachability alone (not the peer's tag,
        # which lags State by a telemetry interval): this is rechecked on every
        # applied batch of events, and a runner's readiness is one.
        fabric = self._fabric
        models = self.capacity.realtime_models()
        return any(self.capacity.ready_local(model) for model in models) or (
            fabric is not None
            and any(
                remote_candidates(self._node, fabric, model, None, single_host=True)
                for model in models
            )
        )

    def _relay_target(self, model: str, caller: str) -> NodeId | None:
        """The reachable peer advertising ``stt.realtime`` that serves ``model`` when this
        node does not (never the caller itself: a relay goes one hop)."""
        fabric = self._fabric
        if fabric is None:
            return None
        peers = remote_candidates(self._node, fabric, model, REALTIME_ID, single_host=True)
        return next((peer for peer in peers if peer != caller), None)

    def _route(self, model: str, caller: str) -> CapabilityError | InstanceId | _Relay:
        """The local instance for a call, the peer to relay it to, or why neither."""
        found = self.capacity.check(model)
        if isinstance(found, CapabilityError) and found.code == "unreachable":
            peer = self._relay_target(model, caller)
            if peer is not None:
                return _Relay(peer)
        return found

    def admit_stream(self, context: object, call: CapabilityCall) -> CapabilityError | None:
        opened = opening(call.payload)
        if isinstance(opened, CapabilityError):
            return opened
        found = self._route(opened.model, call.caller_node)
        return found if isinstance(found, CapabilityError) else None

    async def handle_input_stream(
        self,
        context: object,
        call: CapabilityCall,
        input_frames: AsyncIterator[CapabilityStreamFrame],
    ) -> AsyncIterator[CapabilityStreamFrame]:
        out = OutputFrames(call.call_id)

        opened = opening(call.payload)
        if isinstance(opened, CapabilityError):
            yield out("failed", error=opened)
            return
        found = self._route(opened.model, call.caller_node)
        if isinstance(found, CapabilityError):
            yield out("failed", error=found)
            return
        if isinstance(found, _Relay):
            assert self._fabric is not None
            relayed = relay(self._fabric, found.peer, REALTIME_DESCRIPTOR, call, input_frames, out)
            async with contextlib.aclosing(relayed):  # a caller gone cancels the peer's call
                async for frame in relayed:
                    yield frame
            return
        instance_id = found
        self.capacity.reserve(instance_id)
        try:
            async for frame in self._serve(opened, instance_id, input_frames, out):
                yield frame
        finally:
            self.capacity.release(instance_id)

    async def _serve(
        self,
        opened: RealtimeOpening,
        instance_id: InstanceId,
        input_frames: AsyncIterator[CapabilityStreamFrame],
        out: Callable[..., CapabilityStreamFrame],
    ) -> AsyncIterator[CapabilityStreamFrame]:
        task = TranscribeRealtime(
            task_id=new_task_id(),
            temperature=opened.temperature,
            transcription_delay_ms=opened.delay_ms,
        )
        task_id: TaskId = task.task_id
        command_id = new_command_id()
        results: asyncio.Queue[SpeechPartial | Answer | _End] = asyncio.Queue()
        worker = self._worker
        self._commands.register(command_id, lambda: worker.cancel(instance_id, task_id))
        job = asyncio.create_task(worker.speech(instance_id, task, command_id, results.put_nowait))
        job.add_done_callback(lambda done: _job_ended(done, task_id, results))
        pump = asyncio.create_task(self._pump(opened, instance_id, task_id, input_frames, results))
        pump.add_done_callback(lambda done: _pump_ended(done, results))
        text_bytes = 0
        try:
            while True:
                item = await results.get()
                match item:
                    case SpeechPartial(segment=segment):
                        if segment is None or not segment.text:
                            continue
                        text_bytes += len(segment.text.encode())
                        if text_bytes > MAX_TRANSCRIPT_BYTES:
                            yield out(
                                "failed",
                                error=_error(
                                    "payload_too_large",
                                    f"the transcript exceeds {MAX_TRANSCRIPT_BYTES} bytes",
                                ),
                            )
                            return
                        yield out(
                            "chunk",
                            {"model": opened.model, "text": segment.text, "is_partial": True},
                        )
                    case _End(error=error):
                        yield out("failed", error=error)
                        return
                    case ErrorChunk(code=code, message=message):
                        await self._settled(task_id)
                        yield out("failed", error=_error(code, message))
                        return
                    case Transcribed(text=text):
                        await self._settled(task_id)
                        yield out(
                            "completed", {"model": opened.model, "text": text, "is_partial": False}
                        )
                        return
                    case _:
                        yield out(
                            "failed",
                            error=_error("provider_error", "the runner answered out of kind"),
                        )
                        return
        finally:
            self._commands.finish(command_id)
            pump.cancel()
            if not job.done():
                job.cancel()
                # NOTE: the runner is told too: a cancellation that lands while the
                # supervisor waits on an already-settled runner is swallowed by
                # Python 3.11's asyncio.wait_for, and the task would then wait for
                # audio that never comes.
                worker.cancel(instance_id, task_id)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job

    async def _pump(
        self,
        opened: RealtimeOpening,
        instance_id: InstanceId,
        task_id: TaskId,
        input_frames: AsyncIterator[CapabilityStreamFrame],
        results: asyncio.Queue[SpeechPartial | Answer | _End],
    ) -> None:
        """Caller chunks → 16 kHz packets on the runner's pipe, then the final packet;
        ended (``timeout``) when the audio stops keeping pace, since this call holds the
        instance's only realtime slot (:mod:`.realtime_pacing`)."""
        # NOTE: closed here, not left to the collector: the caller's input ends with the
        # pump (a stall, the session's end), so its own cleanup runs at once.
        try:
            async with contextlib.aclosing(
                paced(input_frames, bytes_per_second=opened.sample_rate * 2)
            ) as items:
                await self._pump_items(opened, instance_id, task_id, items, results)
        except InputStalled as stalled:
            results.put_nowait(_End(_error("timeout", str(stalled))))

    async def _pump_items(
        self,
        opened: RealtimeOpening,
        instance_id: InstanceId,
        task_id: TaskId,
        input_frames: AsyncIterator[CapabilityStreamFrame],
        results: asyncio.Queue[SpeechPartial | Answer | _End],
    ) -> None:
        # NOTE: numpy (the resampler's) loads with the first realtime session, not at
        # daemon start (issue 43).
        from skulk_core.audio.realtime_resample import Resampler  # noqa: PLC0415

        resampler = Resampler(opened.sample_rate, RUNNER_RATE)
        received = 0
        worker = self._worker
        async for item in input_frames:
            if item.kind == "started":
                continue
            if item.kind != "chunk":
                break  # the caller half-closed its input
            problem = media_problem(opened.sample_rate, item)
            if problem is not None:
                results.put_nowait(_End(_error("invalid_payload", problem)))
                return
            assert isinstance(item.media, InlineMediaAttachment)
            received += len(item.media.data)
            if received > MAX_CALL_AUDIO_BYTES:
                results.put_nowait(
                    _End(_error("payload_too_large", "the call's audio exceeds 64 MiB"))
                )
                return
            pcm = resampler.feed_pcm16(item.media.data)
            if pcm and not await _send_audio(
                worker, instance_id, RealtimeAudio(task_id=task_id, pcm=pcm)
            ):
                results.put_nowait(_End(_error("unreachable", "the speech runner has gone")))
                return
        await _send_audio(worker, instance_id, RealtimeAudio(task_id=task_id, final=True))

    async def _settled(self, task_id: TaskId) -> None:
        """Until ``/state`` shows the task terminal or gone (bounded)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STATE_WAIT_SECONDS
        while loop.time() < deadline:
            found = self._node.state.tasks.get(task_id)
            if found is None or found.task_status not in (TaskStatus.PENDING, TaskStatus.RUNNING):
                return
            await asyncio.sleep(0.02)


async def _send_audio(worker: Supervisor, instance_id: InstanceId, packet: RealtimeAudio) -> bool:
    """One packet on the pipe of this node's serving runner of the instance."""
    for runner in worker.runners():
        if (
            runner.instance_id == instance_id
            and runner.phase is LocalRunnerPhase.SERVING
            and runner.process is not None
        ):
            return await runner.process.send_audio(packet)
    return False


def _pump_ended(
    done: asyncio.Task[None], results: asyncio.Queue[SpeechPartial | Answer | _End]
) -> None:
    if done.cancelled() or done.exception() is None:
        return
    log.error("the realtime input pump failed: %s", done.exception())
    results.put_nowait(_End(_error("provider_error", "the realtime input pump failed")))


def _job_ended(
    done: asyncio.Task[Answer],
    task_id: TaskId,
    results: asyncio.Queue[SpeechPartial | Answer | _End],
) -> None:
    if done.cancelled():
        return
    failure = done.exception()
    results.put_nowait(
        done.result()
        if failure is None
        else ErrorChunk(task_id=task_id, code="engine_failed", message=str(failure))
    )


def register_realtime(
    node: Node, worker: Supervisor, commands: ActiveCommands, capabilities: CapabilityService
) -> RealtimeSttProvider:
    """Serve ``stt.realtime@1.0.0`` on this node, its tag advertised exactly while it is
    ready (rechecked after every applied batch of events)."""
    provider = RealtimeSttProvider(node, worker, commands, capabilities)
    capabilities.register_extension(provider, None, builtin=True)

    def refresh() -> None:
        if provider.capability_ready(REALTIME_ID):
            capabilities.advertise(REALTIME_ID)
        else:
            capabilities.withdraw(REALTIME_ID)

    refresh()
    node.on_applied(refresh)
    return provider
