"""The daemon's in-process CPU a streamed token, without a model, HTTP or a runner.

Runner frames (the bytes a runner writes for each token) are fed, one per event-loop
wake-up, to the real reading path: ``StdoutReader`` -> ``RunnerProcess`` dispatch and
its task router -> the generation's feed -> ``generation_events`` -> ``turn_events``
-> the OpenAI ``sse_stream``. Each next frame is fed once the previous token's SSE
bytes are out, so every token costs its own wake-up, as
on a CPU decoding one stream. The figure is the process's CPU time (user + system)
over the tokens: unlike wall time it barely moves with the machine's load, so it
compares two trees on a busy machine. It is a part of ``daemon_tokens.py``'s figure
(which adds the supervisor, HTTP, the pipe and socket system calls), not a substitute.

With ``--baseline-tree DIR`` (a copy of the tree with the previous code) both trees
run, alternating round by round, each in its own process.

    .venv/bin/python -m bench.token_path [--tokens 2000] [--streams 3] [--rounds 3] \
        [--baseline-tree /tmp/skulk-before] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, "") and "--one" not in sys.argv:  # `python bench/token_path.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO_ROOT = Path(__file__).resolve().parent.parent


class _Stdin:
    """The runner's stdin as ``RunnerProcess`` writes to it (nothing reads it here)."""

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    async def drain(self) -> None:
        pass


class _Process:
    stdin = _Stdin()
    pid = 0


async def _measure(tokens: int, streams: int) -> float:
    """CPU microseconds a token over ``streams`` streams of ``tokens`` (after one warm-up)."""
    from skulk_core.chat.generation import (  # noqa: PLC0415 (the tree under test's)
        FinishChunk,
        GenerationRequest,
        GenerationStats,
        SamplingParams,
        TokenChunk,
    )
    from skulk_core.chat.tools import NO_TOOLS  # noqa: PLC0415
    from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId  # noqa: PLC0415
    from skulk_core.models.cards import Memory, ModelCard  # noqa: PLC0415
    from skulk_daemon.chat.admission import Admitted  # noqa: PLC0415
    from skulk_daemon.chat.cancellation import ActiveCommands  # noqa: PLC0415
    from skulk_daemon.chat.generation import generation_events  # noqa: PLC0415
    from skulk_daemon.chat.openai_wire import sse_stream  # noqa: PLC0415
    from skulk_daemon.chat.turn import turn_events  # noqa: PLC0415
    from skulk_daemon.runner.client import RunnerProcess  # noqa: PLC0415
    from skulk_daemon.runner.inbound import StdoutReader  # noqa: PLC0415
    from skulk_daemon.runner.protocol import encode_frame  # noqa: PLC0415
    from skulk_daemon.runner.routing import TaskRouter  # noqa: PLC0415

    # A RunnerProcess without an OS process: only its frame routing and generate().
    runner: Any = RunnerProcess.__new__(RunnerProcess)
    runner._process = _Process()
    runner._exit = None
    runner._tasks = TaskRouter(4096, lambda _task: None, lambda: True)
    reader = StdoutReader(runner._dispatch)

    class Worker:
        # A tree before issue 43's direct feed asks for generate(), one after it
        # for open_generation(): the runner's own reading either way.
        def generate(self, instance_id: Any, request: Any, command_id: Any) -> Any:
            return runner.generate(request)

        async def open_generation(
            self, instance_id: Any, request: Any, command_id: Any, *, keepalive_s: Any = None
        ) -> Any:
            return await runner.open_generation(request, keepalive_s)

        def cancel(self, instance_id: Any, task_id: Any) -> None:
            pass

    stats = GenerationStats(
        prompt_tps=1.0,
        generation_tps=1.0,
        prompt_tokens=7,
        generation_tokens=tokens,
        serving_batches=False,
        in_flight_at_admission=1,
        time_to_first_token_ms=1.0,
    )
    card = ModelCard(model_id=ModelId("bench"), storage_size=Memory(in_bytes=1), n_layers=1)

    async def stream(n: int, count: int) -> None:
        task = TaskId(f"t-{n}")
        admitted = Admitted(
            command_id=CommandId(f"c-{n}"),
            task_id=task,
            model="bench",
            instance_id=InstanceId("i"),
            card=card,
            generation=GenerationRequest(
                task_id=task, prompt="p", sampling=SamplingParams(max_tokens=count)
            ),
            offer=NO_TOOLS,
            starts_in_reasoning=False,
            include_usage=True,
            created=0,
        )
        frames = [
            encode_frame(TokenChunk(task_id=task, text=" word", token_id=5)) for _ in range(count)
        ]
        frames.append(
            encode_frame(
                FinishChunk(
                    task_id=task,
                    finish_reason="length",
                    prompt_tokens=7,
                    completion_tokens=count,
                    stats=stats,
                )
            )
        )
        pending = iter(frames)
        loop = asyncio.get_running_loop()
        events = generation_events(Worker(), ActiveCommands(), admitted)  # type: ignore[arg-type]
        body = sse_stream(admitted, turn_events(admitted, events))
        loop.call_soon(reader.data_received, next(pending))
        async for _ in body:
            frame = next(pending, None)
            if frame is not None:
                loop.call_soon(reader.data_received, frame)

    await stream(0, 50)
    started = time.process_time()
    for n in range(streams):
        await stream(n + 1, tokens)
    return (time.process_time() - started) * 1e6 / (tokens * streams)


def _run_tree(tree: Path, tokens: int, streams: int) -> float:
    """One measurement in a fresh interpreter that imports ``tree``'s packages (``-P``:
    not this file's directory's)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-P", __file__, "--one", str(tokens), str(streams)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-tree", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(asyncio.run(_measure(*args.one)))
        return 0
    trees = {"current": REPO_ROOT}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree.resolve()
    runs: dict[str, list[float]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            runs[name].append(_run_tree(trees[name], args.tokens, args.streams))
            print(
                f"round {round_ + 1} {name}: {runs[name][-1]:.1f} µs CPU a token", file=sys.stderr
            )
    load = os.getloadavg()[0]
    for name, values in runs.items():
        print(
            f"{name}: {statistics.median(values):.1f} µs CPU a token "
            f"(median of {len(values)}, {min(values):.1f}-{max(values):.1f}; load {load:.1f})"
        )
    if "baseline" in runs:
        ratio = statistics.median(runs["current"]) / statistics.median(runs["baseline"])
        print(f"current / baseline: {ratio:.3f}")
    if args.json:
        print(json.dumps({"benchmark": "token_path", "runs": runs, "load": load}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
