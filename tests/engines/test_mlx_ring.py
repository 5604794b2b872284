"""An MLX ring of two real runners: each rank loads only its layers, they talk over
``mx.distributed``'s ring backend through the cluster's gates, and rank 0 answers.

Two runner processes (``python -m skulk_daemon.runner``) on this machine's loopback
play two nodes: rank 1 holds the second half of the converted demo's layers, rank
0 the first half plus the embeddings and the head. What rank 0 generates at
temperature 0 is what ``mlx_lm`` generates with the whole model in one process.
Only members reach a rank: its MLX port sits in the runner's private network
namespace, and its gate refuses a peer without the key. Losing rank 1 fails rank 0
with the code the cluster re-places on.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import msgspec
import psutil
import pytest

from skulk_core.chat.generation import (
    FinishChunk,
    GenerationRequest,
    SamplingParams,
    TokenChunk,
)
from skulk_core.ids import TaskId
from skulk_daemon.models.mlx_demo import mlx_installed
from skulk_daemon.runner.protocol import (
    Failed,
    Generate,
    Load,
    MlxRingLeg,
    Phase,
    RunnerMessage,
    Shutdown,
    decode_runner_message,
    encode_frame,
    read_frame,
)
from skulk_daemon.runner.rpc_gate import MAGIC
from skulk_daemon.runner.rpc_relay import recv_exactly
from skulk_daemon.telemetry.mlx_probe import mlx_runs
from tests.model_cache import mlx_demo_model, mlx_whole_model_text

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces"),
    pytest.mark.skipif(not (mlx_installed() and mlx_runs()), reason="MLX does not run here"),
    pytest.mark.xdist_group("runner_netns"),
]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 300.0
KEY = bytes(range(32))
INSTANCE = "ring-test-instance"
PROMPT = "The capital of France is"
TOKENS = 8  # each decoded token costs a ring round trip on a shared 2-core machine
NODES = ("node-rank-0", "node-rank-1")
IDLE_SETTLE_S = 0.5
IDLE_S = 3.0
IDLE_CPU_SHARE = 0.05
"""Of one core, per rank, while the ring has nothing to do."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Rank:
    """A real MLX runner holding one rank of the ring."""

    def __init__(self, tmp: Path, model: Path, leg: MlxRingLeg) -> None:
        self.log = tmp / f"rank{leg.rank}.log"
        host, port = leg.endpoints[leg.rank].rsplit(":", 1)
        self.gate = (host, int(port))
        self.detail = ""
        """What the rank said when it became ready."""
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "skulk_daemon.runner"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        assert self.process.stdin is not None
        load = Load(model_path=str(model), context_tokens=512, engine="mlx", ring=leg)
        self.send(load)

    def send(self, message: msgspec.Struct) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(encode_frame(message))
        self.process.stdin.flush()

    def next(self) -> RunnerMessage:
        body = read_frame(cast(BinaryIO, self.process.stdout))
        assert body is not None, f"the runner exited: {self.log.read_text()[-3000:]}"
        return decode_runner_message(body)

    def ready(self) -> str:
        while True:
            message = self.next()
            assert not isinstance(message, Failed), message
            if isinstance(message, Phase) and message.phase == "ready":
                return message.detail

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.send(Shutdown())
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


@pytest.fixture(scope="module")
def mlx_model(request: pytest.FixtureRequest, shared_models_dir: Path) -> Path:
    return mlx_demo_model(request.config.rootpath / ".pytest_cache", shared_models_dir)


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory, mlx_model: Path) -> Iterator[list[Rank]]:
    tmp = tmp_path_factory.mktemp("ring")
    endpoints = (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
    legs = [
        MlxRingLeg(
            instance_id=INSTANCE,
            gate_key=KEY,
            rank=rank,
            nodes=NODES,
            endpoints=endpoints,
            start_layer=start,
            end_layer=end,
        )
        for rank, (start, end) in enumerate([(0, 9), (9, 18)])
    ]
    # Rank 1 first and rank 0 second, and both must wait for each other.
    ranks = [Rank(tmp, mlx_model, legs[1]), Rank(tmp, mlx_model, legs[0])]
    ranks.reverse()

    def wait(index: int) -> None:
        ranks[index].detail = ranks[index].ready()

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert all(r.detail for r in ranks), [r.log.read_text()[-2000:] for r in ranks]
    yield ranks
    for rank in ranks:
        rank.stop()


def generate(rank: Rank, prompt: str, max_tokens: int) -> tuple[str, FinishChunk]:
    task = TaskId("t-" + os.urandom(4).hex())
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    rank.send(Generate(request=GenerationRequest(task_id=task, prompt=prompt, sampling=sampling)))
    text = ""
    while True:
        message = rank.next()
        if isinstance(message, TokenChunk):
            text += message.text
        elif isinstance(message, FinishChunk):
            return text, message
        else:
            assert not isinstance(message, Failed), message


def test_the_ring_answers_as_the_whole_model_does(
    ring: list[Rank], request: pytest.FixtureRequest, shared_models_dir: Path
) -> None:
    text, finish = generate(ring[0], PROMPT, TOKENS)
    assert finish.completion_tokens == TOKENS
    cache = request.config.rootpath / ".pytest_cache"
    assert text == mlx_whole_model_text(cache, shared_models_dir, PROMPT, TOKENS)
    # The ranks keep their caches: the same prompt again is trimmed back to all but
    # its last token on both ranks (only that one prefilled), and answers the same.
    again, finish = generate(ring[0], PROMPT, TOKENS)
    assert again == text
    assert finish.stats is not None
    assert finish.stats.cached_tokens == finish.prompt_tokens - 1


def cpu_seconds(process: subprocess.Popen[bytes]) -> float:
    """CPU time of a rank's runner and its children (its gate relay)."""
    runner = psutil.Process(process.pid)
    total = 0.0
    for one in [runner, *runner.children(recursive=True)]:
        times = one.cpu_times()
        total += times.user + times.system
    return total


def test_an_idle_ring_costs_no_cpu_and_answers_after(ring: list[Rank]) -> None:
    generate(ring[0], PROMPT, 2)  # every rank has been through a step
    time.sleep(IDLE_SETTLE_S)
    before = [cpu_seconds(rank.process) for rank in ring]
    started = time.monotonic()
    time.sleep(IDLE_S)
    elapsed = time.monotonic() - started
    used = [cpu_seconds(rank.process) - seconds for rank, seconds in zip(ring, before, strict=True)]
    # MLX's ring receive spins at about half a core per waiting rank.
    assert all(seconds / elapsed < IDLE_CPU_SHARE for seconds in used), used
    text, finish = generate(ring[0], PROMPT, 2)
    assert finish.completion_tokens == 2 and text


def test_only_members_reach_a_rank(ring: list[Rank]) -> None:
    for rank in ring:
        assert "MLX ring port isolated in" in rank.detail
        pid = rank.process.pid
        # MLX's own port is in the runner's network namespace, not this one.
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    # The gate asks for the key before anything reaches MLX.
    with socket.create_connection(ring[1].gate, timeout=10) as stranger:
        assert recv_exactly(stranger, len(MAGIC) + 32).startswith(MAGIC)
        stranger.sendall(bytes(64))  # a wrong answer
        assert stranger.recv(1) == b""  # refused
    assert "refused RPC peer" in ring[1].log.read_text()


def test_losing_a_rank_fails_rank_0_with_the_node_named(ring: list[Rank]) -> None:
    ring[1].process.kill()
    ring[1].process.wait()
    while True:
        message = ring[0].next()
        if isinstance(message, Failed):
            assert message.code == f"mlx_ring_peer_lost:{NODES[1]}"
            return
