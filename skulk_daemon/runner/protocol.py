"""The runner's wire: length-prefixed msgpack frames over the runner's stdin/stdout.

A frame is a 4-byte big-endian body length, then one msgpack-encoded message
(a tagged union, so either side dispatches with ``match``). stdout carries only
frames; the runner logs to stderr.

Parent → runner: :class:`Load` (first, once), then :class:`Generate` (or
:class:`Embed`, for a runner loaded in ``"embed"`` mode), :class:`Cancel` and
finally :class:`Shutdown` (or just closing stdin).
Runner → parent: :class:`Phase` transitions, :class:`Failed` when it cannot go
on, the engine's chunks for every generation, and one :class:`Embedded` (or an
:class:`~skulk_core.chat.generation.ErrorChunk`) for every embedding task.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import BinaryIO, ClassVar, Final, Literal

import msgspec

from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.chat.generation import ErrorChunk, FinishChunk, GenerationRequest, TokenChunk
from skulk_core.ids import TaskId
from skulk_core.media.music_wire import MusicSpec
from skulk_core.media.video_wire import VideoSpec
from skulk_core.models.cards import ModelTask
from skulk_daemon.engines.base import DEFAULT_SLOTS

log = logging.getLogger("skulk.runner")

MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
"""Largest frame either side accepts: far above any prompt, small enough that a
corrupt length cannot make the reader allocate gigabytes."""

_HEADER: Final = struct.Struct(">I")

PARENT_PID_ENV: Final = "SKULK_RUNNER_PARENT_PID"
"""Set by the parent so the runner can tell it was orphaned before it could
arrange to die with its parent."""
VERBOSE_ENV: Final = "SKULK_RUNNER_VERBOSE"
"""``1`` lets llama.cpp's own log through to the runner's stderr."""

RunnerPhase = Literal["loading", "loaded", "warming_up", "ready", "shutting_down", "shutdown"]
RunnerMode = Literal["generate", "embed", "rpc_donor", "speak", "transcribe", "render", "image"]
"""What a runner serves: text generation (``Generate``), embeddings (``Embed``), its
memory to an RPC pool's driver (``"rpc_donor"``: no model, no tasks), speech synthesis
(``Synthesize``) or speech to text (``Transcribe``), media jobs (``"render"``:
``RenderVideo``/``ComposeMusic``) or images (``"image"``: :class:`RenderImages`); a
speech, media or image runner's ``model_path`` is its model directory."""
RunnerEngine = Literal["llama_cpp", "mlx"]
"""The engine behind a ``"generate"`` runner."""

ERROR_CANCELLED: Final = "cancelled"
"""The ``ErrorChunk`` code that ends a cancelled embedding task."""


class RpcDonorRoute(msgspec.Struct, frozen=True, kw_only=True):
    """One donor of a driver's pool: its gate (``host:port``) and the layers it holds."""

    node_id: str
    endpoint: str
    layers: int


class RpcPool(msgspec.Struct, frozen=True, kw_only=True):
    """A driver's donors, in layer order. ``gate_key`` is a secret derived from the
    cluster key: it travels only on the runner's stdin and is never logged."""

    instance_id: str
    gate_key: bytes
    donors: tuple[RpcDonorRoute, ...]


class RpcServe(msgspec.Struct, frozen=True, kw_only=True):
    """What a donor serves: its gate on ``host:port``, admitting ``instance_id``'s
    driver by ``gate_key`` (a secret, as in :class:`RpcPool`)."""

    instance_id: str
    gate_key: bytes
    host: str
    port: int


class MlxRingLeg(msgspec.Struct, frozen=True, kw_only=True):
    """This runner's rank in an MLX ring: its layers, and every rank's node and gate
    (``host:port`` on the fabric), in rank order. Rank 0 serves requests; the others
    run their layers for it. ``gate_key`` is a secret, as in :class:`RpcPool`."""

    instance_id: str
    gate_key: bytes
    rank: int
    nodes: tuple[str, ...]
    endpoints: tuple[str, ...]
    start_layer: int
    end_layer: int


class Load(msgspec.Struct, frozen=True, kw_only=True, tag="load"):
    """``context_tokens`` is each sequence's window; in ``"embed"`` mode it is the
    longest input, and ``slots`` is unused. A driver of an RPC pool has ``pool``;
    an ``"rpc_donor"`` runner has ``serve`` and no model."""

    model_path: str
    context_tokens: int
    slots: int = DEFAULT_SLOTS
    n_threads: int | None = None
    mode: RunnerMode = "generate"
    pool: RpcPool | None = None
    serve: RpcServe | None = None
    prompt_cache_bytes: int = 0
    """The host-RAM prompt cache's budget (``"generate"`` mode; 0: off)."""
    reuse_replies: bool = True
    """Reuse a reply's cells, and any common prefix, on the conversation's next turn
    (see ``_llama_slots``); ``False``: the bit-exact mode."""
    settle_after: float | None = None
    """Idle seconds before a slot is settled (see ``llama_cpp``); ``None``: never."""
    kv_cache: str | None = None
    """llama.cpp's KV cell type (``"f16"``, ``"q8_0"``, ``"q4_0"``); ``None``: its default."""
    flash_attention: bool | None = None
    """Flash attention in llama.cpp; ``None``: llama.cpp decides."""
    engine: RunnerEngine = "llama_cpp"
    """Which engine serves ``"generate"`` mode: llama.cpp (``model_path`` is a GGUF
    file) or MLX (``model_path`` is an MLX model directory)."""
    ring: MlxRingLeg | None = None
    """An MLX runner's rank in a ring across nodes (``engine == "mlx"``)."""


class Generate(msgspec.Struct, frozen=True, kw_only=True, tag="generate"):
    request: GenerationRequest


class Embed(msgspec.Struct, frozen=True, kw_only=True, tag="embed"):
    """Embed ``inputs``; answered by one :class:`Embedded` or ``ErrorChunk``."""

    task_id: TaskId
    inputs: tuple[str, ...]


class Embedded(msgspec.Struct, frozen=True, kw_only=True, tag="embedded"):
    """One vector per input, in input order: ``vectors`` holds ``count`` rows of
    ``dimensions`` little-endian float32 (4 bytes a number where msgpack floats
    take 9, and exactly what the model computed)."""

    task_id: TaskId
    vectors: bytes
    count: int
    dimensions: int
    prompt_tokens: int


class Synthesize(msgspec.Struct, frozen=True, kw_only=True, tag="synthesize"):
    """Speak ``text``; answered by one :class:`Synthesized` or ``ErrorChunk``."""

    KIND: ClassVar[ModelTask] = ModelTask.TEXT_TO_SPEECH
    task_id: TaskId
    text: str
    voice: str | None = None
    speed: float = 1.0
    seed: int | None = None
    """The request's seed: its synthesis must be reproducible."""
    stream: bool = False
    """Send each sentence's PCM as a :class:`SpeechPartial` as soon as it is spoken;
    the closing ``Synthesized`` then carries no samples."""


class Synthesized(msgspec.Struct, frozen=True, kw_only=True, tag="synthesized"):
    """Mono signed 16-bit little-endian PCM at ``sample_rate``."""

    task_id: TaskId
    pcm: bytes
    sample_rate: int
    sentences: int


class Transcribe(msgspec.Struct, frozen=True, kw_only=True, tag="transcribe"):
    """Transcribe (or, with ``translate``, translate to English) an uploaded audio
    file's bytes; answered by one :class:`Transcribed` or ``ErrorChunk``. The bytes
    travel only on this pipe; they are never logged."""

    KIND: ClassVar[ModelTask] = ModelTask.SPEECH_TO_TEXT
    task_id: TaskId
    audio: bytes
    language: str | None = None
    prompt: str | None = None
    temperature: float | None = None
    translate: bool = False
    stream: bool = False
    """Send each decoded segment as a :class:`SpeechPartial` before ``Transcribed``."""


class TranscribeRealtime(msgspec.Struct, frozen=True, kw_only=True, tag="transcribe_realtime"):
    """Open a streaming transcription (one utterance) on the model's
    ``create_streaming_session``; its audio follows as :class:`RealtimeAudio` packets.
    Each newly confirmed piece of text comes back as a :class:`SpeechPartial` whose
    segment holds the delta; one :class:`Transcribed` (the accumulated text) or
    ``ErrorChunk`` answers it once the final packet has been decoded."""

    KIND: ClassVar[ModelTask] = ModelTask.SPEECH_TO_TEXT
    task_id: TaskId
    temperature: float | None = None
    transcription_delay_ms: int = 480


class RealtimeAudio(msgspec.Struct, frozen=True, kw_only=True, tag="realtime_audio"):
    """A bounded packet of a :class:`TranscribeRealtime` task's audio: mono signed
    16-bit little-endian PCM at 16 kHz (at most 1 MiB). ``final`` half-closes the
    input. Never logged."""

    task_id: TaskId
    pcm: bytes = b""
    final: bool = False


class SpeechPartial(msgspec.Struct, frozen=True, kw_only=True, tag="speech_partial"):
    """Part of a streamed speech task, in order: a sentence's PCM (synthesis) or a
    decoded segment (transcription)."""

    task_id: TaskId
    index: int
    pcm: bytes = b""
    segment: TranscriptSegment | None = None


class Transcribed(msgspec.Struct, frozen=True, kw_only=True, tag="transcribed"):
    task_id: TaskId
    text: str
    language: str
    duration: float
    segments: tuple[TranscriptSegment, ...] = ()


class RenderVideo(msgspec.Struct, frozen=True, kw_only=True, tag="render_video"):
    """Render one clip into ``output_dir`` (``video.mp4``, ``thumbnail.jpg``);
    ``inputs`` are the attachments' files, in ``spec.attachments`` order. Answered by
    :class:`MediaProgress` parts, then one :class:`MediaRendered` or ``ErrorChunk``."""

    KIND: ClassVar[ModelTask] = ModelTask.TEXT_TO_VIDEO
    task_id: TaskId
    spec: VideoSpec
    inputs: tuple[str, ...] = ()
    output_dir: str


class ComposeMusic(msgspec.Struct, frozen=True, kw_only=True, tag="compose_music"):
    """Compose one piece into ``output_dir`` (``music.wav``); answered like
    :class:`RenderVideo`."""

    KIND: ClassVar[ModelTask] = ModelTask.TEXT_TO_MUSIC
    task_id: TaskId
    spec: MusicSpec
    output_dir: str


class MediaProgress(msgspec.Struct, frozen=True, kw_only=True, tag="media_progress"):
    """A media task's approximate percent complete and its current phase."""

    task_id: TaskId
    progress: int
    stage: Literal["encoding", "sampling", "decoding", "muxing"]


class MediaRendered(msgspec.Struct, frozen=True, kw_only=True, tag="media_rendered"):
    """The render report: the files written into the task's ``output_dir`` (the
    container first) and the runner's timing. The files are the second plane: the
    parent verifies them before the job completes."""

    task_id: TaskId
    files: tuple[str, ...]
    steps: int
    total_generation_time: float
    peak_memory_bytes: int | None = None
    engine: str


class RenderImages(msgspec.Struct, frozen=True, kw_only=True, tag="render_images"):
    """Render ``count`` images (edits: from ``init_image``, an encoded picture); answered
    by one :class:`ImagesRendered` or ``ErrorChunk``. With ``previews`` > 0, that many
    :class:`ImagePreview` per image come first. Image ``i`` uses ``seed + i``."""

    KIND: ClassVar[ModelTask] = ModelTask.TEXT_TO_IMAGE
    task_id: TaskId
    prompt: str
    negative_prompt: str = ""
    width: int
    height: int
    count: int = 1
    seed: int
    steps: int
    guidance: float
    init_image: bytes | None = None
    strength: float = 0.75
    previews: int = 0
    collect_stats: bool = False


class ImagePreview(msgspec.Struct, frozen=True, kw_only=True, tag="image_preview"):
    """An intermediate picture of image ``index`` (PNG), the ``number``-th of its previews."""

    task_id: TaskId
    index: int
    number: int
    png: bytes


class ImageStats(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine measured of one render (the bench routes' ``generation_stats``)."""

    load_seconds: float = 0.0
    render_seconds: float
    steps: int
    images: int
    seconds_per_step: float


class ImagesRendered(msgspec.Struct, frozen=True, kw_only=True, tag="images_rendered"):
    """Each image as a lossless PNG, in seed order; the API node re-encodes."""

    task_id: TaskId
    images: tuple[bytes, ...]
    width: int
    height: int
    stats: ImageStats | None = None


class Cancel(msgspec.Struct, frozen=True, kw_only=True, tag="cancel"):
    task_id: TaskId


class Shutdown(msgspec.Struct, frozen=True, kw_only=True, tag="shutdown"):
    pass


class Phase(msgspec.Struct, frozen=True, kw_only=True, tag="phase"):
    phase: RunnerPhase
    detail: str = ""


class Failed(msgspec.Struct, frozen=True, kw_only=True, tag="failed"):
    """The runner cannot serve; ``message`` is for an operator. It exits next.
    ``code`` names a failure the cluster acts on (``rpc_donor_lost:<node>``,
    ``rpc_port_in_use:<host>:<port>``); empty for any other."""

    message: str
    code: str = ""


ParentMessage = (
    Load
    | Generate
    | Embed
    | Synthesize
    | Transcribe
    | TranscribeRealtime
    | RealtimeAudio
    | RenderVideo
    | ComposeMusic
    | RenderImages
    | Cancel
    | Shutdown
)
TaskMessage = (
    TokenChunk
    | FinishChunk
    | ErrorChunk
    | Embedded
    | Synthesized
    | Transcribed
    | SpeechPartial
    | MediaProgress
    | MediaRendered
    | ImagesRendered
    | ImagePreview
)
"""A runner message that belongs to one task."""
RunnerMessage = Phase | Failed | TaskMessage
MediaTask = RenderVideo | ComposeMusic
"""A media job's task, answered from its one request message."""
SpeechTask = Synthesize | Transcribe
"""A speech task answered from its one request message."""
RunnerSpeechTask = SpeechTask | TranscribeRealtime
"""Every speech task a runner serves (a realtime one also takes ``RealtimeAudio``)."""


class ProtocolError(ValueError):
    """A frame that cannot be read: oversized, truncated or undecodable."""


_ENCODER: Final = msgspec.msgpack.Encoder()
_PARENT_DECODER: Final = msgspec.msgpack.Decoder(ParentMessage)
_RUNNER_DECODER: Final = msgspec.msgpack.Decoder(RunnerMessage)


def encode_frame(message: ParentMessage | RunnerMessage) -> bytes:
    body = _ENCODER.encode(message)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"a {len(body)}-byte frame exceeds {MAX_FRAME_BYTES} bytes")
    return _HEADER.pack(len(body)) + body


def _body_length(header: bytes | bytearray, offset: int = 0) -> int:
    (length,) = _HEADER.unpack_from(header, offset)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES} bytes")
    return int(length)


def decode_parent_message(body: bytes) -> ParentMessage:
    try:
        return _PARENT_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"bad frame from the parent: {exc}") from None


def decode_runner_message(body: bytes) -> RunnerMessage:
    try:
        return _RUNNER_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"bad frame from the runner: {exc}") from None


def read_frame(stream: BinaryIO) -> bytes | None:
    """Blocking read of one frame body; ``None`` at a clean end of stream."""
    header = stream.read(_HEADER.size)
    if not header:
        return None
    if len(header) < _HEADER.size:
        raise ProtocolError("the stream ended inside a frame header")
    length = _body_length(header)
    body = stream.read(length)
    if len(body) < length:
        raise ProtocolError("the stream ended inside a frame")
    return body


class FrameSplitter:
    """Cuts a byte stream into frame bodies as it arrives, for a reader that is
    handed bytes (an asyncio protocol) rather than one that asks for them: a frame
    is ready the moment its last byte is, with no task to wake per frame."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The bodies ``data`` completes, in order; the rest waits for more.
        Raises :class:`ProtocolError` on a header past :data:`MAX_FRAME_BYTES`."""
        buffer = self._buffer
        buffer += data
        bodies: list[bytes] = []
        offset, size, held = 0, _HEADER.size, len(buffer)
        while held - offset >= size:
            end = offset + size + _body_length(buffer, offset)
            if end > held:
                break
            bodies.append(bytes(buffer[offset + size : end]))
            offset = end
        del buffer[:offset]
        return bodies

    def end(self) -> None:
        """The stream has ended: raises :class:`ProtocolError` if it stopped inside
        a frame."""
        if len(self._buffer) >= _HEADER.size:
            raise ProtocolError("the stream ended inside a frame")
        if self._buffer:
            raise ProtocolError("the stream ended inside a frame header")


def serve_frames(
    stdin: BinaryIO,
    *,
    generate: Callable[[GenerationRequest], None],
    embed: Callable[[TaskId, tuple[str, ...]], None],
    cancel: Callable[[TaskId], None],
    speech: Callable[[RunnerSpeechTask], None] | None = None,
    audio: Callable[[RealtimeAudio], None] | None = None,
    media: Callable[[MediaTask], None] | None = None,
    images: Callable[[RenderImages], None] | None = None,
) -> bool:
    """The runner's main loop once it serves: hand each of the parent's frames to
    its handler until :class:`Shutdown` (True) or the end of stdin (False: the
    parent is gone).

    A second :class:`Load` is ignored: a runner holds one model for its life.
    Raises :class:`ProtocolError` on a frame that cannot be read."""
    while True:
        body = read_frame(stdin)
        if body is None:
            log.info("stdin closed: the parent is gone; exiting")
            return False
        match decode_parent_message(body):
            case Generate(request=request):
                generate(request)
            case Embed(task_id=task_id, inputs=inputs):
                embed(task_id, inputs)
            case Synthesize() | Transcribe() | TranscribeRealtime() as task:
                if speech is None:
                    raise ProtocolError("this runner serves no speech tasks")
                speech(task)
            case RealtimeAudio() as packet:
                if audio is None:
                    raise ProtocolError("this runner serves no realtime transcription")
                audio(packet)
            case RenderVideo() | ComposeMusic() as job:
                if media is None:
                    raise ProtocolError("this runner serves no media jobs")
                media(job)
            case RenderImages() as render:
                if images is None:
                    raise ProtocolError("this runner renders no images")
                images(render)
            case Cancel(task_id=task_id):
                cancel(task_id)
            case Shutdown():
                return True
            case Load():
                log.warning("ignoring a second Load: this runner already holds a model")
