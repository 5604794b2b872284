"""The runner subprocess and its daemon-side handle, on the real demo model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest

from skulk_core.chat.generation import (
    EngineChunk,
    ErrorChunk,
    FinishChunk,
    GenerationRequest,
    SamplingParams,
    TokenChunk,
)
from skulk_core.ids import TaskId
from skulk_daemon.runner.client import (
    ERROR_CONSUMER_TOO_SLOW,
    ERROR_RUNNER_FAILED,
    RunnerExit,
    RunnerFailed,
    RunnerProcess,
    spawned_runner_pids,
)
from skulk_daemon.runner.protocol import (
    Load,
    Phase,
    RunnerPhase,
    decode_runner_message,
    encode_frame,
    read_frame,
)
from tests.daemon_process import LEAN_RUNNER_THREADS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"
HANG_GUARD_S = 120.0  # only stops a broken test from hanging; not a timing claim


# The only continuation this grammar allows: known by construction, on any CPU.
FORCED = " 4\n\n2 + 2 = 4"
FORCED_GRAMMAR = f"root ::= {json.dumps(FORCED)}"


def request(
    task_id: str, prompt: str, max_tokens: int, grammar: str | None = None
) -> GenerationRequest:
    return GenerationRequest(
        task_id=TaskId(task_id),
        prompt=prompt,
        sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0, grammar=grammar),
    )


def load(model: Path, slots: int = 1) -> Load:
    # One compute thread, as every test node's runner (tests/daemon_process.py).
    return Load(
        model_path=str(model), context_tokens=512, slots=slots, n_threads=LEAN_RUNNER_THREADS
    )


async def drain(runner: RunnerProcess, req: GenerationRequest) -> list[EngineChunk]:
    async with asyncio.timeout(HANG_GUARD_S):
        return [chunk async for chunk in runner.generate(req)]


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


def test_phases_arrive_in_order_and_generation_streams(demo_gguf: Path) -> None:
    phases: list[RunnerPhase] = []
    exits: list[RunnerExit] = []

    async def body() -> None:
        runner = await RunnerProcess.start(load(demo_gguf), phases.append, on_exit=exits.append)
        try:
            assert phases == ["loading", "loaded", "warming_up", "ready"]
            assert runner.pid in spawned_runner_pids()  # its memory is the node's telemetry's
            chunks = await drain(runner, request("t", "2 + 2 =", 4, FORCED_GRAMMAR))
        finally:
            returncode = await runner.shutdown(10.0)
        *tokens, end = chunks
        assert all(isinstance(c, TokenChunk) for c in tokens)
        text = "".join(c.text for c in tokens if isinstance(c, TokenChunk))
        assert text.startswith(" 4") and FORCED.startswith(text)
        assert isinstance(end, FinishChunk)
        assert (end.finish_reason, end.completion_tokens) == ("length", 4)

        assert returncode == 0
        assert runner.pid not in spawned_runner_pids()
        assert phases[-2:] == ["shutting_down", "shutdown"]
        assert [(e.returncode, e.expected) for e in exits] == [(0, True)]
        record = runner.flight_record()
        assert [what for _, what in record if what.startswith("phase")][:4] == [
            "phase loading: " + str(demo_gguf),
            "phase loaded",
            "phase warming_up",
            "phase ready",
        ]
        assert [t for t, _ in record] == sorted(t for t, _ in record)

    run(body)


def test_killing_the_runner_fails_open_generations_at_once(demo_gguf: Path) -> None:
    exits: list[RunnerExit] = []

    async def body() -> None:
        runner = await RunnerProcess.start(
            load(demo_gguf), lambda _phase: None, on_exit=exits.append
        )
        generation = runner.generate(request("long", COUNTING, 400))
        async with contextlib.aclosing(generation), asyncio.timeout(HANG_GUARD_S):
            assert isinstance(await anext(generation), TokenChunk)
            os.kill(runner.pid, signal.SIGKILL)
            rest = [chunk async for chunk in generation]
        end = rest[-1]
        assert isinstance(end, ErrorChunk)
        assert end.code == ERROR_RUNNER_FAILED
        assert "SIGKILL" in end.message

        ended = await asyncio.wait_for(runner.wait(), HANG_GUARD_S)
        assert exits == [ended]
        assert runner.pid not in spawned_runner_pids()
        assert not ended.expected
        assert runner.returncode == -signal.SIGKILL
        # A dead runner answers new work with the same error instead of hanging.
        after = await drain(runner, request("after", "2 + 2 =", 2))
        assert [type(c) for c in after] == [ErrorChunk]
        assert await runner.shutdown(1.0) == -signal.SIGKILL

    run(body)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "model file not found: "),
        (b"not a model at all", "is not a GGUF model file"),
        (b"GGUF" + bytes(64), "bad GGUF version"),  # llama.cpp's own words
    ],
    ids=["missing", "not-gguf", "damaged-gguf"],
)
def test_an_unloadable_model_fails_with_a_readable_message(
    tmp_path: Path, content: bytes | None, expected: str
) -> None:
    model = tmp_path / "model.gguf"
    if content is not None:
        model.write_bytes(content)
    phases: list[RunnerPhase] = []

    async def body() -> None:
        with pytest.raises(RunnerFailed) as failure:
            await RunnerProcess.start(load(model), phases.append)
        assert expected in str(failure.value)
        assert str(model) in str(failure.value)
        assert phases == ["loading"]

    run(body)


def test_a_runner_that_garbles_its_stdout_is_stopped_with_a_protocol_error(
    tmp_path: Path,
) -> None:
    # The interpreter runs sitecustomize before the runner: a frame it cannot decode.
    (tmp_path / "sitecustomize.py").write_text(
        "import os\nos.write(1, b'\\x00\\x00\\x00\\x03abc')\n"
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)

    async def body() -> None:
        with pytest.raises(RunnerFailed) as failure:
            async with asyncio.timeout(HANG_GUARD_S):
                await RunnerProcess.start(
                    load(tmp_path / "unused.gguf"), lambda _phase: None, env={"PYTHONPATH": path}
                )
        assert "killed by SIGKILL: bad frame from the runner" in str(failure.value)

    run(body)


def test_leaving_a_generation_early_cancels_it_on_the_runner(demo_gguf: Path) -> None:
    async def body() -> None:
        runner = await RunnerProcess.start(load(demo_gguf, slots=2), lambda _phase: None)
        try:
            async with contextlib.aclosing(runner.generate(request("a", COUNTING, 400))) as gen:
                async for _ in gen:
                    break
            # Had the runner not cancelled "a", it would refuse the id as in use.
            chunks = await drain(runner, request("a", "2 + 2 =", 2))
            assert [type(c) for c in chunks] == [TokenChunk, TokenChunk, FinishChunk]
            end = chunks[-1]
            assert isinstance(end, FinishChunk)
            assert (end.finish_reason, end.completion_tokens) == ("length", 2)
        finally:
            await runner.shutdown(10.0)

    run(body)


def test_a_reader_that_falls_too_far_behind_is_cut_off(demo_gguf: Path) -> None:
    async def body() -> None:
        runner = await RunnerProcess.start(
            load(demo_gguf, slots=2), lambda _phase: None, queue_chunks=4
        )
        try:
            slow = await runner.open_generation(request("slow", COUNTING, 20))
            try:
                # NOTE: read a take at a time, not through generate(): a take hands
                # over every chunk queued at that moment (under load the first may
                # hold two), and only what stays queued counts against the bound.
                first = await slow.take()
                assert first and all(isinstance(c, TokenChunk) for c in first)
                # A steady reader on a longer generation: when it is done, the
                # slow one (batched with it) has certainly produced all 20 tokens.
                fast = await drain(runner, request("fast", COUNTING, 40))
                assert isinstance(fast[-1], FinishChunk)
                rest: list[EngineChunk] = []
                while not slow.finished:
                    rest += await slow.take() or ()
            finally:
                slow.close()
            assert [type(c) for c in rest] == [TokenChunk] * 4 + [ErrorChunk]
            end = rest[-1]
            assert isinstance(end, ErrorChunk)
            assert end.code == ERROR_CONSUMER_TOO_SLOW
        finally:
            await runner.shutdown(10.0)

    run(body)


def test_the_runner_exits_cleanly_when_stdin_closes(demo_gguf: Path) -> None:
    runner = subprocess.Popen(
        [sys.executable, "-m", "skulk_daemon.runner"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert runner.stdin is not None
    assert runner.stdout is not None
    try:
        runner.stdin.write(encode_frame(load(demo_gguf)))
        runner.stdin.flush()
        phases: list[str] = []
        while "ready" not in phases:
            body = read_frame(runner.stdout)
            assert body is not None, f"the runner stopped after {phases}"
            message = decode_runner_message(body)
            assert isinstance(message, Phase), message
            phases.append(message.phase)
        runner.stdin.close()  # what the parent's death looks like from here
        while (body := read_frame(runner.stdout)) is not None:
            message = decode_runner_message(body)
            assert isinstance(message, Phase), message
            phases.append(message.phase)
        assert runner.wait(HANG_GUARD_S) == 0
        assert phases == ["loading", "loaded", "warming_up", "ready", "shutting_down", "shutdown"]
    finally:
        runner.kill()
        runner.wait()
        runner.stdin.close()
        runner.stdout.close()


PARENT = """
import asyncio, sys
from skulk_daemon.runner.client import RunnerProcess
from skulk_daemon.runner.protocol import Load

async def main():
    load = Load(model_path=sys.argv[1], context_tokens=256, slots=1, n_threads=1)
    runner = await RunnerProcess.start(load, lambda phase: None)
    print(runner.pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_runner_dies_with_its_parent(demo_gguf: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(demo_gguf)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    runner_pid = 0
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        runner_pid = int(line)
        assert not _gone(runner_pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + HANG_GUARD_S
        while not _gone(runner_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(runner_pid)
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if runner_pid and not _gone(runner_pid):
            os.kill(runner_pid, signal.SIGKILL)
