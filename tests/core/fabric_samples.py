"""Realistic fabric values shared by the protocol, replication and fuzz tests.

One well-formed value of every :data:`skulk_core.cluster.fabric.Body` type (several for the
unions inside them), plus the builders they are made from.
"""

from __future__ import annotations

import typing
from datetime import UTC, datetime
from typing import Any

import msgspec
from hypothesis import strategies as st

from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.chat.generation import (
    ErrorChunk,
    FinishChunk,
    GenerationRequest,
    GenerationStats,
    SamplingParams,
    TokenChunk,
)
from skulk_core.cluster.election import Alive, Campaign, Coordinator, Incumbent, Rank, Session
from skulk_core.cluster.fabric import (
    PROTOCOL_VERSION,
    Beat,
    Body,
    CancelTask,
    CapabilityCancel,
    CapabilityData,
    CapabilityDescribe,
    CapabilityDescribed,
    CapabilityOpen,
    CapabilityOutcome,
    CommandOutcome,
    DataFrame,
    Elect,
    EventBatch,
    Header,
    ImagePart,
    ImagesDone,
    PeerAddress,
    Plane,
    RenderJob,
    RunImages,
    RunSpeech,
    RunTask,
    ShareHfToken,
    Snapshot,
    SpeechAccepted,
    SpeechAudio,
    SpeechSegment,
    SpeechText,
    SubmitCommand,
    SyncRequest,
    SynthesisDone,
    SynthesisJob,
    TranscriptionDone,
    TranscriptionJob,
)
from skulk_core.cluster.telemetry import (
    NodeIdentityInfo,
    NodeMemory,
    NodeResources,
    NodeSystem,
    NodeTelemetry,
    Participation,
)
from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityResult,
    CapabilityStreamFrame,
    InlineMediaAttachment,
)
from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, NodeInstallId, RunnerId, TaskId
from skulk_core.models.cards import Memory
from skulk_core.state.commands import CreateInstance, RegisterNode, ReportConnections
from skulk_core.state.events import (
    ConnectionsReported,
    Event,
    IndexedEvent,
    InstanceCreated,
    MasterElected,
    NodeJoined,
    RunnerStatusUpdated,
)
from skulk_core.state.shards import (
    MlxRingInstance,
    PipelineShardMetadata,
    RunnerIdle,
    RunnerReady,
    ShardAssignments,
)
from skulk_core.state.state import Connection, State, Topology

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ALPHA = NodeId("12D3KooWalpha")
BETA = NodeId("12D3KooWbeta")
GAMMA = NodeId("12D3KooWgamma")
GIB = 1024**3


def instance(
    instance_id: str = "i1",
    nodes: tuple[NodeId, ...] = (ALPHA,),
    model: str = "local/m",
) -> MlxRingInstance:
    """A pipeline instance with one runner per node (runner ids derived from both)."""
    runners = {node: RunnerId(f"{instance_id}-r{rank}") for rank, node in enumerate(nodes)}
    return MlxRingInstance(
        instance_id=InstanceId(instance_id),
        shard_assignments=ShardAssignments(
            model_id=ModelId(model),
            node_to_runner=runners,
            runner_to_shard={
                runner: PipelineShardMetadata(
                    model_id=ModelId(model),
                    device_rank=rank,
                    world_size=len(nodes),
                    start_layer=rank,
                    end_layer=rank + 1,
                    n_layers=len(nodes),
                )
                for rank, runner in enumerate(runners.values())
            },
        ),
        context_token_limit=4096,
    )


def telemetry(node: NodeId = ALPHA) -> NodeTelemetry:
    return NodeTelemetry(
        node_id=node,
        identity=NodeIdentityInfo(
            friendly_name=str(node),
            node_install_id=NodeInstallId(f"install-{node}"),
            skulk_version="0.0.0",
        ),
        memory=NodeMemory(ram_total=Memory(in_bytes=64 * GIB), ram_available=Memory(in_bytes=GIB)),
        system=NodeSystem(
            os="Linux",
            os_version="6.8",
            machine="x86_64",
            cpu_model="Test CPU",
            cpu_count=8,
            hostname=str(node),
            python_version="3.11.9",
        ),
        resources=NodeResources(
            backends=("llama_cpp",),
            participation=Participation.FULL,
            api_available=True,
            data_transport="zmq",
        ),
        observed_at=NOW,
    )


def indexed(
    idx: int, event: Event | None = None, *, term: int = 1, by: NodeId | None = ALPHA
) -> IndexedEvent:
    """An event at ``idx``, indexed by master ``by`` in ``term``."""
    return IndexedEvent(
        idx=idx,
        event=event if event is not None else NodeJoined(node_id=NodeId(f"12D3KooWn{idx}")),
        origin=ALPHA,
        recorded_at=NOW,
        command_id=CommandId(f"c{idx}"),
        term=term,
        indexed_by=by,
    )


def events(
    start: int, stop: int, *, term: int = 1, by: NodeId | None = ALPHA
) -> list[IndexedEvent]:
    """Indexed ``NodeJoined`` events ``start .. stop - 1``."""
    return [indexed(i, term=term, by=by) for i in range(start, stop)]


def edge(src: NodeId, dst: NodeId, port: int = 52416) -> Connection:
    return Connection(
        local_node_id=src,
        send_back_node_id=dst,
        sink_multiaddr=f"/ip4/10.0.0.1/tcp/{port}",
        session=True,
    )


def busy_state() -> State:
    """A State with something in every field the wire has to carry."""
    inst = instance("i1", (ALPHA, BETA))
    runner = next(iter(inst.shard_assignments.runner_to_shard))
    return State(
        instances={inst.instance_id: inst},
        runners={runner: RunnerReady()},
        last_seen={ALPHA: NOW},
        topology=Topology(nodes=(ALPHA, BETA), connections=(edge(ALPHA, BETA),)),
        master_node_id=ALPHA,
        election_term=3,
        last_event_applied_idx=41,
    )


def rank(node: NodeId = ALPHA, *, term: int = 1, index: int = 10) -> Rank:
    return Rank(node_id=node, last_term=term, last_index=index)


def header(
    origin: NodeId = BETA,
    *,
    plane: Plane = "control",
    session: Session | None = None,
    seq: int = 1,
    version: int = PROTOCOL_VERSION,
) -> Header:
    return Header(
        version=version,
        plane=plane,
        origin=origin,
        seq=seq,
        session=session,
    )


def sample_bodies() -> list[Body]:
    """Every Body type, the unions inside them varied."""
    inst = instance()
    return [
        Beat(fabric_port=52416, skulk_version="0.0.0", transport="zmq", rank=rank()),
        Beat(
            fabric_port=1,
            skulk_version="0.0.0",
            transport="zmq",
            rank=Rank(node_id=BETA, forced=True),
            reading=telemetry(BETA),
            last_idx=7,
            peers=(PeerAddress(node_id=GAMMA, address="[fe80::1]:52416"),),
        ),
        Elect(message=Campaign(term=2, rank=rank())),
        Elect(message=Alive(term=2, rank=rank(BETA))),
        Elect(message=Coordinator(term=2, rank=rank(GAMMA))),
        Elect(message=Incumbent(term=2, rank=rank(BETA), master=GAMMA, forced=True)),
        SubmitCommand(
            request_id="r1", command=RegisterNode(command_id=CommandId("c1"), node_id=BETA)
        ),
        SubmitCommand(
            request_id="r2", command=CreateInstance(command_id=CommandId("c2"), instance=inst)
        ),
        SubmitCommand(
            request_id="r3",
            command=ReportConnections(
                command_id=CommandId("c3"), node_id=BETA, connections=(edge(BETA, ALPHA),)
            ),
        ),
        CommandOutcome(request_id="r1", last_idx=12),
        CommandOutcome(request_id="r2", refused_code="instance_exists", refused_message="no"),
        EventBatch(events=()),
        EventBatch(
            events=(
                indexed(0),
                indexed(1, MasterElected(master_node_id=ALPHA, term=1)),
                indexed(2, InstanceCreated(instance=inst)),
                indexed(3, RunnerStatusUpdated(runner_id=RunnerId("i1-r0"), status=RunnerIdle())),
                indexed(4, ConnectionsReported(node_id=ALPHA, connections=(edge(ALPHA, BETA),))),
            )
        ),
        SyncRequest(last_idx=-1, last_term=0),
        SyncRequest(last_idx=99, last_term=4, last_master=BETA),
        Snapshot(state=State(), last_term=0),
        Snapshot(state=busy_state(), last_term=3, last_master=ALPHA),
        *generation_bodies(),
        *capability_bodies(),
        *speech_bodies(),
        *image_bodies(),
    ]


def generation_request(task_id: str = "t1") -> GenerationRequest:
    """A request with every sampling knob away from its default."""
    return GenerationRequest(
        task_id=TaskId(task_id),
        prompt="<start_of_turn>user\nhi ☃<end_of_turn>\n",
        sampling=SamplingParams(
            max_tokens=64,
            temperature=0.0,
            top_p=0.9,
            top_k=40,
            min_p=0.05,
            seed=7,
            stop=("</s>", "\n\n"),
            frequency_penalty=0.5,
            presence_penalty=-0.5,
            repetition_penalty=1.1,
            repetition_context_size=32,
            logprobs=True,
            top_logprobs=2,
            strict_max_tokens=True,
            grammar='root ::= "yes" | "no"',
        ),
    )


def generation_chunks(task_id: str = "t1") -> list[TokenChunk | FinishChunk | ErrorChunk]:
    """One chunk of each kind, with their optional fields set."""
    task = TaskId(task_id)
    return [
        TokenChunk(task_id=task, text="", token_id=0),
        TokenChunk(
            task_id=task, text="yes", token_id=9, logprob=-0.25, top_logprobs=[("yes", -0.25)]
        ),
        FinishChunk(
            task_id=task,
            finish_reason="stop",
            prompt_tokens=12,
            completion_tokens=2,
            stats=GenerationStats(
                prompt_tps=1500.0,
                generation_tps=40.5,
                prompt_tokens=12,
                generation_tokens=2,
                serving_batches=True,
                in_flight_at_admission=2,
                max_in_flight_at_admission=3,
                cached_tokens=8,
                time_to_first_token_ms=12.5,
            ),
            stop_sequence="</s>",
        ),
        ErrorChunk(task_id=task, code="context_length_exceeded", message="too long"),
    ]


def generation_bodies() -> list[Body]:
    """A remote generation's messages: the typed request, its typed chunks, and the
    opaque (media) payloads the data plane also carries."""
    command = CommandId("c1")
    chunks = generation_chunks()
    return [
        RunTask(command_id=command, instance_id=InstanceId("i1"), request=generation_request()),
        RunTask(
            command_id=CommandId("c2"),
            instance_id=InstanceId("i1"),
            request=GenerationRequest(
                task_id=TaskId("t2"), prompt="", sampling=SamplingParams(max_tokens=1)
            ),
        ),
        CancelTask(command_id=command),
        ShareHfToken(token="hf_sample", revision="0" * 32),
        *(
            DataFrame(command_id=command, seq=seq, payload=chunk, final=seq == len(chunks) - 1)
            for seq, chunk in enumerate(chunks)
        ),
        DataFrame(command_id=command, seq=0, payload=b""),
        DataFrame(command_id=command, seq=5, payload=b"\x00\xffmedia", final=True),
    ]


def speech_bodies() -> list[Body]:
    """A remote speech task's messages: its typed job and answer pieces."""
    command, task = CommandId("c3"), TaskId("t3")
    transcription = TranscriptionJob(
        task_id=task, audio_bytes=3, audio_frames=1, audio_sha256="ab" * 32, translate=True
    )
    payloads = [
        SpeechAccepted(task_id=task),
        SpeechAudio(task_id=task, pcm=b"\x01\x00", index=0, last=False),
        SpeechSegment(
            task_id=task, index=0, segment=TranscriptSegment(id=0, start=0.0, end=1.0, text="Hi.")
        ),
        SpeechText(task_id=task, text="Hi."),
        SynthesisDone(task_id=task, sample_rate=22_050, sentences=1),
        TranscriptionDone(task_id=task, language="en", duration=1.0),
    ]
    return [
        RunSpeech(
            command_id=command,
            instance_id=InstanceId("i1"),
            job=SynthesisJob(task_id=task, text="Hi.", seed=7),
        ),
        RunSpeech(command_id=command, instance_id=InstanceId("i1"), job=transcription),
        *(
            DataFrame(command_id=command, seq=seq, payload=payload)
            for seq, payload in enumerate(payloads)
        ),
    ]


def image_bodies() -> list[Body]:
    """A remote render's messages: its job and answer pieces."""
    command, task = CommandId("c4"), TaskId("t4")
    job = RenderJob(
        task_id=task, prompt="a fox", width=512, height=512, seed=7, steps=2, guidance=5.0
    )
    payloads = [
        SpeechAccepted(task_id=task),
        ImagePart(task_id=task, index=0, number=0, png=b"\x89PNG", last=True),
        ImagePart(task_id=task, index=0, png=b"\x89PNG", last=False),
        ImagesDone(task_id=task, width=512, height=512, count=1, render_seconds=1.5, steps=2),
    ]
    return [
        RunImages(command_id=command, instance_id=InstanceId("i1"), job=job),
        *(
            DataFrame(command_id=command, seq=seq, payload=payload)
            for seq, payload in enumerate(payloads)
        ),
    ]


def capability_bodies() -> list[Body]:
    """The capability fabric's control and data messages."""
    descriptor = CapabilityDescriptor(
        id="echo",
        version="1.0.0",
        title="Echo",
        description="Echoes its input.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        output_schema={"type": "object"},
        io_mode="server_streaming",
        output_chunk_schema={"type": "object"},
    )
    call = CapabilityCall(
        call_id="k1",
        capability_id="echo",
        version="1.0.0",
        descriptor_revision="sha256:00",
        caller_node=ALPHA,
        target_node=BETA,
        timeout_seconds=2.5,
        payload={"text": "hi", "nested": [1, None, {"x": 1.5}]},
    )
    return [
        CapabilityDescribe(request_id="d1"),
        CapabilityDescribed(request_id="d1", descriptors=(descriptor,)),
        CapabilityOpen(call=call),
        CapabilityOpen(call=call, stream=True),
        CapabilityOutcome(result=CapabilityResult.success("k1", {"text": "hi"})),
        CapabilityOutcome(result=CapabilityResult.failure("k1", "overloaded", "busy"), stream=True),
        CapabilityCancel(call_id="k1", message="enough"),
        CapabilityData(
            frame=CapabilityStreamFrame(
                call_id="k1", direction="provider_to_caller", sequence=0, kind="started"
            )
        ),
        CapabilityData(
            frame=CapabilityStreamFrame(
                call_id="k1",
                direction="caller_to_provider",
                sequence=3,
                kind="chunk",
                payload={"format": "pcm_s16le"},
                media=InlineMediaAttachment(
                    data=b"\x00\x01" * 8,
                    media_type="audio/pcm",
                    codec="pcm_s16le",
                    sample_rate=16000,
                    channels=1,
                ),
            )
        ),
    ]


# -- hypothesis strategies ---------------------------------------------------------

TAGS = sorted(str(kind.__struct_config__.tag) for kind in typing.get_args(Body))

_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
    # Values that decode as something: known ids, times with and without a zone,
    # indices at the edges.
    | st.sampled_from(
        [ALPHA, BETA, GAMMA, "2026-11-30T12:00:00", "2026-11-30T12:00:00Z", -1, 0, 1, 2**62]
    )
)
msgpack_values = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=30,
)


def _mutate(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """Replace one part of ``value`` (a builtins tree) with something arbitrary."""
    if depth > 8 or not isinstance(value, dict | list) or not value or data.draw(st.booleans()):
        return data.draw(msgpack_values)
    if isinstance(value, dict):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutate(data, value[key], depth + 1)}
    at = data.draw(st.integers(0, len(value) - 1))
    return [*value[:at], _mutate(data, value[at], depth + 1), *value[at + 1 :]]


@st.composite
def near_miss_bodies(draw: st.DrawFn) -> bytes:
    """A valid body with one field replaced, or a known tag with random fields, or a
    valid encoding cut short or with a byte flipped: what gets past the first checks."""
    body = draw(st.sampled_from(sample_bodies()))
    kind = draw(st.sampled_from(["mutate", "tag", "truncate", "flip"]))
    encoded = msgspec.msgpack.encode(body)
    if kind == "mutate":
        return msgspec.msgpack.encode(_mutate(draw(st.data()), msgspec.to_builtins(body)))
    if kind == "tag":
        fields = draw(st.dictionaries(st.text(max_size=12), msgpack_values, max_size=5))
        return msgspec.msgpack.encode({**fields, "type": draw(st.sampled_from(TAGS))})
    if kind == "truncate":
        return encoded[: draw(st.integers(0, max(0, len(encoded) - 1)))]
    at = draw(st.integers(0, len(encoded) - 1))
    flipped = encoded[at] ^ draw(st.integers(1, 255))
    return encoded[:at] + bytes([flipped]) + encoded[at + 1 :]
