"""What every kind of remote runner task shares on the wire: numbered frames to one
node, inputs cut into frames of at most 1 MiB and announced by size, frame count and
SHA-256, and the owner's assembler that turns the answer's pieces back into one
answer. Nothing here waits or decides; :mod:`skulk_daemon.fabric.remote_relay` does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.fabric import MAX_SPEECH_FRAME_BYTES, DataPayload
from skulk_core.ids import CommandId, NodeId, TaskId
from skulk_daemon.runner.client import Answer

if TYPE_CHECKING:
    from skulk_daemon.fabric.link import FabricLink

ERROR_NODE_LOST: Final = "node_lost"
ERROR_STREAM_BROKEN: Final = "stream_broken"
ERROR_UNAVAILABLE: Final = "instance_unavailable"


def split(data: bytes, size: int = MAX_SPEECH_FRAME_BYTES) -> list[bytes]:
    """``data`` in pieces of at most ``size`` bytes (at least one piece)."""
    return [data[start : start + size] for start in range(0, len(data), size)] or [b""]


class FrameSender:
    """Numbers one command's frames to ``node`` (the owner, or a serving node)."""

    def __init__(self, link: FabricLink, node: NodeId, command_id: CommandId) -> None:
        self._link = link
        self._node = node
        self._command_id = command_id
        self._seq = 0
        self.failed = False

    def send(self, payload: DataPayload, *, final: bool = False) -> bool:
        if self.failed:
            return False
        sent = self._link.data.send(self._node, self._command_id, self._seq, payload, final=final)
        if not sent:
            self.failed = True
            return False
        self._seq += 1
        return True


def relay_error(task_id: TaskId, code: str, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=code, message=message)


class ForeignFrame(Exception):
    """A frame of a kind this task's answer never carries."""


class Announced(NamedTuple):
    """An input as its job announces it; the serving node checks what arrives."""

    size: int
    frames: int
    sha256: str
    """Lowercase hex."""


@dataclass(frozen=True, slots=True)
class InputKind:
    """What one kind of task's input is (an edit's image, a transcription's audio)."""

    limit: int
    """The most bytes such an input may have."""
    what: str
    """What it is, for errors ("audio", "image")."""
    mismatch: str
    """The error code when what arrived is not what was announced."""


def announce(data: bytes) -> Announced:
    """An input's size, frame count and SHA-256, as a job carries them."""
    return Announced(len(data), len(split(data)), hashlib.sha256(data).hexdigest())


class Assembler(Protocol):
    """The owner's view of an answer as its pieces arrive."""

    def take(self, payload: DataPayload) -> Answer | None:
        """The answer, once ``payload`` completes it; ``None`` while pieces are still
        coming. Raises :class:`ForeignFrame` for a frame this answer never carries."""
        ...


def send_other(sender: FrameSender, answer: Answer) -> bool:
    """An answer of no kind the task's pieces carry, as the closing (final) frame: an
    error as it is, anything else as the runner's failure."""
    if isinstance(answer, ErrorChunk):
        return sender.send(answer, final=True)
    failure = relay_error(answer.task_id, "engine_failed", "the runner answered out of kind")
    return sender.send(failure, final=True)
