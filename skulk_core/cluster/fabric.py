"""The fabric's wire: envelopes and messages, msgpack-encoded with msgspec.

A frame on the fabric is two ZeroMQ message parts: a small :class:`Header` (protocol
version, plane, origin node, per-origin sequence, session) and the body, one
:data:`Body` value. The header is decoded first, so a frame from a foreign protocol
version or a stale session is dropped without decoding its body; a body that fails
to decode is dropped too. Nothing here performs I/O.

Three planes are kept apart, each with its own handling on the receiving side:

- ``control``: election, commands to the master, indexed events and state sync;
- ``telemetry``: last-write-wins readings every ~1.5 s, which double as heartbeats;
- ``data``: node-addressed token and media frames with per-command sequence
  numbers, bounded per owner, never entering State or the event log; capability
  stream frames ride it too (their openings and cancels are control messages).

A generation's request (:class:`RunTask`) and its chunks (:class:`DataFrame`) are
the typed values of :mod:`skulk_core.chat.generation`, not pre-encoded bytes, so
each is encoded once, with the frame that carries it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.chat.generation import ErrorChunk, FinishChunk, GenerationRequest, TokenChunk
from skulk_core.cluster.election import ElectionMessage, Rank, Session
from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityResult,
    CapabilityStreamFrame,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_core.state.commands import Command
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State

PROTOCOL_VERSION: Final = 3
"""3: a generation's data frame may carry a :class:`TokenRun` (several tokens).
2: ``RunTask.request`` and generation data frames carry typed values (1 carried
them msgpack-encoded inside ``bytes``)."""
MAX_EVENTS_PER_FRAME: Final = 512
MAX_DATA_PAYLOAD_BYTES: Final = 8 * 1024 * 1024
"""The largest opaque (``bytes``) data payload. A generation chunk needs no such
bound: it holds what one token released, and the transport caps every frame."""

Plane = Literal["control", "telemetry", "data"]


class Header(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    version: int
    plane: Plane
    origin: NodeId
    seq: int
    session: Session | None = None
    reply_port: int = 0
    """The sender's fabric port: with the frame's source address, how to answer it
    even before its first beat arrives."""


# -- telemetry plane -----------------------------------------------------------


class PeerAddress(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    node_id: NodeId
    address: str
    """``host:port`` of its fabric socket, as the sender reaches it."""


class Beat(msgspec.Struct, frozen=True, kw_only=True, tag="beat"):
    """Liveness, identity and the latest reading; the first one is the hello.

    ``fabric_port`` lets the receiver connect back; ``last_idx`` (from the master)
    lets followers notice a gap even when every batch was lost; ``peers`` spreads
    the mesh: a node that knows only one peer learns every other from it.
    """

    fabric_port: int
    skulk_version: str
    transport: str
    rank: Rank
    reading: NodeTelemetry | None = None
    last_idx: int = -1
    peers: tuple[PeerAddress, ...] = ()


# -- control plane ---------------------------------------------------------------


class Elect(msgspec.Struct, frozen=True, kw_only=True, tag="elect"):
    message: ElectionMessage


class SubmitCommand(msgspec.Struct, frozen=True, kw_only=True, tag="submit"):
    request_id: str
    command: Command


class CommandOutcome(msgspec.Struct, frozen=True, kw_only=True, tag="outcome"):
    """The master's answer: the index of the command's last event (``-1`` for none),
    or the refusal."""

    request_id: str
    last_idx: int = -1
    refused_code: str | None = None
    refused_message: str | None = None


class EventBatch(msgspec.Struct, frozen=True, kw_only=True, tag="events"):
    """Consecutive events, and who indexed the one just before the first (so a
    follower can tell whether the batch continues its own history)."""

    events: tuple[IndexedEvent, ...]
    prev_term: int = 0
    prev_master: NodeId | None = None


class SyncRequest(msgspec.Struct, frozen=True, kw_only=True, tag="sync"):
    """ "I hold everything up to ``last_idx`` (indexed in ``last_term``); send the rest.\""""

    last_idx: int
    last_term: int
    last_master: NodeId | None = None


class Snapshot(msgspec.Struct, frozen=True, kw_only=True, tag="snapshot"):
    """The master's whole State: for a follower too far behind, or diverged."""

    state: State
    last_term: int
    last_master: NodeId | None = None


class RunTask(msgspec.Struct, frozen=True, kw_only=True, tag="run_task"):
    """Serve a generation on the node that hosts the instance's runner; its chunks
    come back to the owning (API) node as ``command_id``'s data stream."""

    command_id: CommandId
    instance_id: InstanceId
    request: GenerationRequest


class ShareHfToken(msgspec.Struct, frozen=True, kw_only=True, tag="share_hf_token"):
    """A Hugging Face token put through ``PUT /config`` on one node, for every other
    node's own config. Sent only over the PSK-encrypted fabric, never into State:
    State records its ``revision`` (``ClusterSettings.hf_token_revision``) alone."""

    token: str
    revision: str


class CancelTask(msgspec.Struct, frozen=True, kw_only=True, tag="cancel_task"):
    """The owner stopped waiting (client gone, ``/v1/cancel``): stop the generation."""

    command_id: CommandId


class SynthesisJob(msgspec.Struct, frozen=True, kw_only=True, tag="synthesis"):
    """A speech synthesis for a remote runner (the runner's ``Synthesize``)."""

    task_id: TaskId
    text: str
    voice: str | None = None
    speed: float = 1.0
    seed: int | None = None
    stream: bool = False


class TranscriptionJob(msgspec.Struct, frozen=True, kw_only=True, tag="transcription"):
    """A transcription for a remote runner; its audio follows on the data plane
    (never here), and the serving node checks it against ``audio_bytes``,
    ``audio_frames`` and ``audio_sha256`` (lowercase hex) before the runner sees it."""

    task_id: TaskId
    audio_bytes: int
    audio_frames: int
    audio_sha256: str
    language: str | None = None
    prompt: str | None = None
    temperature: float | None = None
    translate: bool = False
    stream: bool = False


SpeechJob = SynthesisJob | TranscriptionJob


class RunSpeech(msgspec.Struct, frozen=True, kw_only=True, tag="run_speech"):
    """Serve a speech task on the node that hosts the instance's runner. A
    transcription's audio goes to that node as ``command_id``'s data stream (raw
    ``bytes`` frames of at most :data:`MAX_SPEECH_FRAME_BYTES`); the answer comes back
    to the owning (API) node as its data stream. ``CancelTask`` stops it."""

    command_id: CommandId
    instance_id: InstanceId
    job: SpeechJob


class RenderJob(msgspec.Struct, frozen=True, kw_only=True, tag="render"):
    """An image render for a remote runner (the runner's ``RenderImages``). An edit's
    input image follows on the data plane (never here); the serving node checks it
    against ``image_bytes``, ``image_frames`` and ``image_sha256`` (lowercase hex)."""

    task_id: TaskId
    prompt: str
    negative_prompt: str = ""
    width: int
    height: int
    count: int = 1
    seed: int
    steps: int
    guidance: float
    strength: float = 0.75
    previews: int = 0
    collect_stats: bool = False
    image_bytes: int = 0
    image_frames: int = 0
    image_sha256: str = ""


class RunImages(msgspec.Struct, frozen=True, kw_only=True, tag="run_images"):
    """Serve a render on the node that hosts the instance's runner; the answer (and
    any previews) come back to the owning (API) node as ``command_id``'s data stream.
    ``CancelTask`` stops it."""

    command_id: CommandId
    instance_id: InstanceId
    job: RenderJob


class CapabilityDescribe(msgspec.Struct, frozen=True, kw_only=True, tag="cap_describe"):
    """Ask a node for its ready capability descriptors."""

    request_id: str


class CapabilityDescribed(msgspec.Struct, frozen=True, kw_only=True, tag="cap_described"):
    request_id: str
    descriptors: tuple[CapabilityDescriptor, ...] = ()


class CapabilityOpen(msgspec.Struct, frozen=True, kw_only=True, tag="cap_open"):
    """A unary call (``stream`` false) or a stream opening, pinned by its envelope;
    ``call.caller_node`` must be the sending node."""

    call: CapabilityCall
    stream: bool = False


class CapabilityOutcome(msgspec.Struct, frozen=True, kw_only=True, tag="cap_outcome"):
    """The provider node's typed answer: a unary call's result, or a stream's
    admission (``{"admitted": true, ...}``) or refusal."""

    result: CapabilityResult
    stream: bool = False


class CapabilityCancel(msgspec.Struct, frozen=True, kw_only=True, tag="cap_cancel"):
    """The caller (only) ends its stream ``call_id`` on the provider node."""

    call_id: str
    message: str | None = None


# -- data plane ------------------------------------------------------------------


MAX_RUN_TOKENS: Final = 64
"""The most tokens one :class:`TokenRun` carries."""


class TokenRun(msgspec.Struct, frozen=True, kw_only=True, tag="tokens"):
    """Consecutive :class:`TokenChunk` values of one generation in one data frame.

    The serving node merges the chunks that queued up while it could not send
    them one by one; the owner unpacks them (:meth:`chunks`) into the same chunks,
    in order, so every token keeps its own id, text and logprobs. ``logprobs`` and
    ``top_logprobs`` are ``None`` when no token of the run has them. A run whose
    lists disagree in length does not decode.
    """

    task_id: TaskId
    texts: list[str]
    token_ids: list[int]
    logprobs: list[float | None] | None = None
    top_logprobs: list[list[tuple[str, float]] | None] | None = None

    def __post_init__(self) -> None:
        count = len(self.token_ids)
        if not 1 <= count <= MAX_RUN_TOKENS:
            raise ValueError(f"a token run carries 1 to {MAX_RUN_TOKENS} tokens, not {count}")
        for name, values in (
            ("texts", self.texts),
            ("logprobs", self.logprobs),
            ("top_logprobs", self.top_logprobs),
        ):
            if values is not None and len(values) != count:
                raise ValueError(f"a token run has {count} token ids but {len(values)} {name}")

    @classmethod
    def of(cls, chunks: Sequence[TokenChunk]) -> TokenRun:
        """The run of ``chunks`` (one generation's, in order; 1 to MAX_RUN_TOKENS)."""
        logprobs = [chunk.logprob for chunk in chunks]
        tops = [chunk.top_logprobs for chunk in chunks]
        return cls(
            task_id=chunks[0].task_id,
            texts=[chunk.text for chunk in chunks],
            token_ids=[chunk.token_id for chunk in chunks],
            logprobs=logprobs if any(lp is not None for lp in logprobs) else None,
            top_logprobs=tops if any(top is not None for top in tops) else None,
        )

    def chunks(self) -> list[TokenChunk]:
        """The chunks this run carries, in order."""
        count = len(self.token_ids)
        logprobs = self.logprobs if self.logprobs is not None else [None] * count
        tops = self.top_logprobs if self.top_logprobs is not None else [None] * count
        return [
            TokenChunk(
                task_id=self.task_id, text=text, token_id=token_id, logprob=lp, top_logprobs=top
            )
            for text, token_id, lp, top in zip(
                self.texts, self.token_ids, logprobs, tops, strict=True
            )
        ]


MAX_SPEECH_FRAME_BYTES: Final = 1024 * 1024
"""The most audio bytes one speech data frame carries (either direction)."""


class SpeechAccepted(msgspec.Struct, frozen=True, kw_only=True, tag="speech_accepted"):
    """The serving node took the speech task (its stream's first frame)."""

    task_id: TaskId


class SpeechAudio(msgspec.Struct, frozen=True, kw_only=True, tag="speech_audio"):
    """Samples of a speech answer (mono s16le), at most :data:`MAX_SPEECH_FRAME_BYTES`.
    ``index`` is the streamed part they belong to (``last`` closes it), or ``-1``
    for the closing answer's samples."""

    task_id: TaskId
    pcm: bytes
    index: int = -1
    last: bool = True


class SpeechSegment(msgspec.Struct, frozen=True, kw_only=True, tag="speech_segment"):
    """A decoded segment: a streamed part (``partial``) or one of the answer's."""

    task_id: TaskId
    index: int
    segment: TranscriptSegment
    partial: bool = False


class SpeechText(msgspec.Struct, frozen=True, kw_only=True, tag="speech_text"):
    """A piece of the transcript's text (long texts travel in several)."""

    task_id: TaskId
    text: str


class SynthesisDone(msgspec.Struct, frozen=True, kw_only=True, tag="synthesis_done"):
    """The synthesis ended; its samples came before."""

    task_id: TaskId
    sample_rate: int
    sentences: int


class ImagePart(msgspec.Struct, frozen=True, kw_only=True, tag="image_part"):
    """Bytes of one PNG of a render's answer, at most :data:`MAX_SPEECH_FRAME_BYTES`:
    image ``index``'s final picture (``number`` -1) or its ``number``-th preview;
    ``last`` closes that picture."""

    task_id: TaskId
    index: int
    number: int = -1
    png: bytes
    last: bool = True


class ImagesDone(msgspec.Struct, frozen=True, kw_only=True, tag="images_done"):
    """The render ended; its ``count`` pictures came before. The stats fields are the
    runner's when it measured (a bench request)."""

    task_id: TaskId
    width: int
    height: int
    count: int
    render_seconds: float | None = None
    load_seconds: float = 0.0
    steps: int = 0


class TranscriptionDone(msgspec.Struct, frozen=True, kw_only=True, tag="transcription_done"):
    """The transcription ended; its segments and text came before."""

    task_id: TaskId
    language: str
    duration: float


SpeechPayload = (
    SpeechAccepted | SpeechAudio | SpeechSegment | SpeechText | SynthesisDone | TranscriptionDone
)

DataPayload = (
    TokenChunk
    | TokenRun
    | FinishChunk
    | ErrorChunk
    | SpeechAccepted
    | SpeechAudio
    | SpeechSegment
    | SpeechText
    | SynthesisDone
    | TranscriptionDone
    | ImagePart
    | ImagesDone
    | bytes
)
"""What one data frame carries: a generation's chunk or run of tokens, a speech
task's answer piece (tagged Structs), or opaque bytes (media), at most
:data:`MAX_DATA_PAYLOAD_BYTES`."""


class DataFrame(msgspec.Struct, frozen=True, kw_only=True, tag="data"):
    """One frame of a command's stream, for the node that owns the command;
    ``final`` marks its last (for a generation, the terminal chunk's frame)."""

    command_id: CommandId
    seq: int
    payload: DataPayload
    final: bool = False


class CapabilityData(msgspec.Struct, frozen=True, kw_only=True, tag="cap_data"):
    """One capability stream frame, in either direction: provider output to the
    caller node, caller input to the provider node. Media travels as raw bytes."""

    frame: CapabilityStreamFrame


Body = (
    Beat
    | Elect
    | SubmitCommand
    | CommandOutcome
    | EventBatch
    | SyncRequest
    | Snapshot
    | RunTask
    | CancelTask
    | RunSpeech
    | RunImages
    | DataFrame
    | CapabilityDescribe
    | CapabilityDescribed
    | CapabilityOpen
    | CapabilityOutcome
    | CapabilityCancel
    | CapabilityData
    | ShareHfToken
)

PLANE_OF: Final[dict[type, Plane]] = {
    Beat: "telemetry",
    Elect: "control",
    SubmitCommand: "control",
    CommandOutcome: "control",
    EventBatch: "control",
    SyncRequest: "control",
    Snapshot: "control",
    RunTask: "control",
    CancelTask: "control",
    RunSpeech: "control",
    RunImages: "control",
    DataFrame: "data",
    CapabilityDescribe: "control",
    CapabilityDescribed: "control",
    CapabilityOpen: "control",
    CapabilityOutcome: "control",
    CapabilityCancel: "control",
    CapabilityData: "data",
    ShareHfToken: "control",
}

_encoder: Final = msgspec.msgpack.Encoder()
_header_decoder: Final = msgspec.msgpack.Decoder(Header)
_fields_decoder: Final = msgspec.msgpack.Decoder(list[msgspec.Raw])
_version_decoder: Final = msgspec.msgpack.Decoder(int)
_body_decoder: Final = msgspec.msgpack.Decoder(Body)


class FrameError(ValueError):
    """A frame that cannot be used; ``reason`` is the diagnostics counter it lands in."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def encode(header: Header, body: Body) -> list[bytes]:
    return [_encoder.encode(header), _encoder.encode(body)]


def decode_header(frames: list[bytes]) -> Header:
    """The header of a frame; raises :class:`FrameError` (``malformed``/``version``)."""
    if len(frames) != 2:
        raise FrameError("malformed", f"expected 2 parts, got {len(frames)}")
    # NOTE: the version is read first, on its own: a frame from another protocol
    # version may not have our header's shape at all, and must still be told apart
    # from garbage.
    try:
        fields = _fields_decoder.decode(frames[0])
        version = _version_decoder.decode(fields[0]) if fields else None
    except msgspec.DecodeError as exc:
        raise FrameError("malformed", str(exc)) from None
    if version is None:
        raise FrameError("malformed", "an empty header")
    if version != PROTOCOL_VERSION:
        raise FrameError("version", f"protocol {version}, expected {PROTOCOL_VERSION}")
    try:
        return _header_decoder.decode(frames[0])
    except msgspec.DecodeError as exc:
        raise FrameError("malformed", str(exc)) from None


def decode_body(frames: list[bytes]) -> Body:
    try:
        return _body_decoder.decode(frames[1])
    except msgspec.DecodeError as exc:
        raise FrameError("malformed", str(exc)) from None
