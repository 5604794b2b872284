"""The per-token cost of serving through another node's API, hop by hop.

Two sections, both diagnostic (the routing target itself is bench/distributed.py's):

* ``hops`` (no model): one generation's tokens through the real pieces of the data
  plane in this process: the frame (:class:`DataFrame` of a ``TokenChunk``), the
  fabric encoding (header + body), the CURVE ZeroMQ send on loopback between two
  real :class:`FabricTransport` ends, the decode on the owner, the owner's
  :class:`DataPlane` delivery and its reader's wake-up. Each hop is timed on its
  own (microseconds of this thread per token), then the whole path end to end as
  the process CPU per token (ZeroMQ's I/O threads, which do the encryption,
  included) with 1, 4 and 16 tokens per frame: what merging tokens into one
  ``TokenRun`` frame saves when the serving node lags.
* ``daemons`` (the demo model): two daemons on loopback, the model on B; the same
  streamed request to B's API (direct) and to A's (routed over the fabric),
  alternating. Per side: decode tokens/s, time to first token, the CPU
  milliseconds per token of each process (A, B, B's runner) and, routed, the
  tokens per data frame A received. With ``--baseline-tree DIR`` (a copy of the
  tree with the previous code) a second pair runs from there, measured in the same
  rounds, so before/after ratios come from one run on one machine load.

Run from the repository root::

    .venv/bin/python -m bench.fabric_tokens [--sections hops daemons] [--reps 4]
        [--baseline-tree /tmp/skulk-before] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import psutil

if __package__ in (None, ""):  # `python bench/fabric_tokens.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_PROMPT,
    LoggedDaemon,
    add_run_options,
    chat_body,
    machine,
    median,
    print_json,
    stream_chat,
    wait_for_quiet,
)
from bench.distributed import BENCH_ENV, _node_id, _wait, place
from skulk_core.chat.generation import TokenChunk
from skulk_core.cluster.fabric import (
    PLANE_OF,
    PROTOCOL_VERSION,
    DataFrame,
    DataPayload,
    Header,
    TokenRun,
    decode_body,
    decode_header,
    encode,
)
from skulk_core.ids import CommandId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import DataPlane
from skulk_daemon.fabric.transport import FabricTransport
from skulk_daemon.node.keys import derive_curve_keys

HOST: Final = NodeId("12D3KooWbenchhost")
OWNER: Final = NodeId("12D3KooWbenchowner")
TASK: Final = TaskId("bench-task")
RUN_SIZES: Final = (1, 4, 16)


# -- hops ------------------------------------------------------------------------


def _token(i: int) -> TokenChunk:
    return TokenChunk(task_id=TASK, text=" word", token_id=1000 + i)


def _header(seq: int) -> Header:
    return Header(
        version=PROTOCOL_VERSION, plane=PLANE_OF[DataFrame], origin=HOST, seq=seq, reply_port=1
    )


def _per_call_us(fn: Callable[[int], object], n: int) -> float:
    start = time.thread_time()
    for i in range(n):
        fn(i)
    return (time.thread_time() - start) / n * 1e6


async def _wire(n: int, run_size: int) -> dict[str, float]:
    """``n`` tokens from one real transport to another, ``run_size`` per frame:
    microseconds per token of the process's CPU, of this (the event loop's) thread
    alone, of ZeroMQ's I/O threads (the rest: CURVE, TCP), and of wall time."""
    keys = derive_curve_keys(b"skulk-bench-fabric-tokens-key-01")
    owner_plane = DataPlane(OWNER, lambda node, frame: True)
    command = CommandId(f"bench-{run_size}")
    stream = owner_plane.open(command, limit=n + 1)

    def on_frames(peer: str, frames: list[bytes]) -> None:
        decode_header(frames)
        body = decode_body(frames)
        assert isinstance(body, DataFrame)
        owner_plane.deliver(body)

    receiver = FabricTransport(bind_host="127.0.0.1", port=0, keys=keys, on_frames=on_frames)
    sender = FabricTransport(
        bind_host="127.0.0.1", port=0, keys=keys, on_frames=lambda p, f: None, send_hwm=n + 1
    )
    await receiver.start()
    await sender.start()
    address = f"127.0.0.1:{receiver.port}"
    sender.connect(address)
    probe = encode(_header(0), DataFrame(command_id=CommandId("probe"), seq=0, payload=b""))
    for _ in range(1000):  # until the CURVE handshake is done
        if sender.send(address, probe):
            break
        await asyncio.sleep(0.01)
    else:
        raise RuntimeError("the loopback fabric never connected")
    tokens = [_token(i) for i in range(n)]
    payloads: list[DataPayload] = [
        tokens[i] if run_size == 1 else TokenRun.of(tokens[i : i + run_size])
        for i in range(0, n, run_size)
    ]
    host_plane = DataPlane(
        HOST, lambda node, frame: sender.send(address, encode(_header(0), frame))
    )
    cpu0, loop0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    got = 0

    async def read() -> int:
        count = 0
        while count < n:
            payload = await stream.next()
            count += len(payload.token_ids) if isinstance(payload, TokenRun) else 1
        return count

    reading = asyncio.create_task(read())
    for seq, payload in enumerate(payloads):
        assert host_plane.send(OWNER, command, seq, payload)
        if seq % 8 == 7:
            await asyncio.sleep(0)  # let the owner's end run, as two processes would
    got = await reading
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    loop_cpu = time.thread_time() - loop0
    assert got == n
    # The send alone: one transport.send of an encoded frame (nothing reads them).
    raw = encode(_header(0), DataFrame(command_id=command, seq=0, payload=tokens[0]))
    send0 = time.thread_time()
    for _ in range(n):
        sender.send(address, raw)
    send_us = (time.thread_time() - send0) / n * 1e6
    await sender.close()
    await receiver.close()
    return {
        "cpu_us_per_token": round(cpu / n * 1e6, 1),
        "loop_thread_us_per_token": round(loop_cpu / n * 1e6, 1),
        "io_threads_us_per_token": round((cpu - loop_cpu) / n * 1e6, 1),
        "wall_us_per_token": round(wall / n * 1e6, 1),
        "transport_send_us_per_frame": round(send_us, 1),
    }


def hops(n: int) -> dict[str, Any]:
    tokens = [_token(i) for i in range(n)]
    command = CommandId("bench")
    frames = [DataFrame(command_id=command, seq=i, payload=tokens[i]) for i in range(n)]
    encoded = [encode(_header(i), frames[i]) for i in range(n)]
    run_raw = encode(
        _header(0), DataFrame(command_id=command, seq=0, payload=TokenRun.of(tokens[:16]))
    )
    sink = DataPlane(OWNER, lambda node, frame: True)
    stream = sink.open(command, limit=n + 1)

    def deliver_and_take(i: int) -> None:
        sink.deliver(frames[i])
        stream._queue.get_nowait()  # the reader's take, without its wake-up

    per_token = {
        "frame_us": _per_call_us(
            lambda i: DataFrame(command_id=command, seq=i, payload=tokens[i]), n
        ),
        "encode_us": _per_call_us(lambda i: encode(_header(i), frames[i]), n),
        "decode_us": _per_call_us(
            lambda i: (decode_header(encoded[i]), decode_body(encoded[i])), n
        ),
        "deliver_us": _per_call_us(deliver_and_take, n),
        "run_of_16_encode_us": _per_call_us(
            lambda i: encode(
                _header(i),
                DataFrame(command_id=command, seq=i, payload=TokenRun.of(tokens[:16])),
            ),
            n // 16,
        )
        / 16,
        "run_of_16_decode_us": _per_call_us(
            lambda i: (decode_header(run_raw), decode_body(run_raw)), n // 16
        )
        / 16,
    }
    wire = {str(size): asyncio.run(_wire(n, size)) for size in RUN_SIZES}
    return {
        "tokens": n,
        "per_token": {k: round(v, 2) for k, v in per_token.items()},
        "end_to_end_by_tokens_per_frame": wire,
    }


# -- daemons ---------------------------------------------------------------------


@dataclass
class Side:
    direct: list[dict[str, float]] = field(default_factory=list)
    routed: list[dict[str, float]] = field(default_factory=list)


@contextmanager
def _pair(
    models_dir: Path, root: Path, tree: Path | None
) -> Iterator[tuple[LoggedDaemon, LoggedDaemon]]:
    a = LoggedDaemon(root=root / "a", models_dir=models_dir, extra_env=dict(BENCH_ENV), tree=tree)
    b = LoggedDaemon(
        root=root / "b",
        models_dir=models_dir,
        peers=[a.fabric_address],
        extra_env=dict(BENCH_ENV),
        tree=tree,
    )
    try:
        a.start()
        b.start()

        def meshed() -> bool:
            topology = a.get("/state").json()["topology"]
            return len(topology["nodes"]) == 2 and len(topology["connections"]) >= 2

        _wait(meshed, "two nodes to mesh", [a, b])
        yield a, b
    finally:
        for daemon in (a, b):
            daemon.kill()
            if daemon._log is not None:
                daemon._log.close()


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _delivered(daemon: LoggedDaemon) -> int:
    data = daemon.get("/v1/diagnostics/node").json()["cluster"]["dataPlane"]
    return int(data["delivered"])


def _measure(
    client: httpx.Client, a: LoggedDaemon, b: LoggedDaemon, routed: bool, body: dict[str, Any]
) -> dict[str, float]:
    assert a.process is not None and b.process is not None
    procs = {"a": psutil.Process(a.process.pid), "b": psutil.Process(b.process.pid)}
    runners = procs["b"].children(recursive=True)
    if runners:
        procs["runner"] = runners[0]
    before = {k: _cpu_s(p) for k, p in procs.items()}
    frames_before = _delivered(a)
    timing = stream_chat(client, (a if routed else b).url, body)
    frames = _delivered(a) - frames_before
    tokens = max(timing.tokens, 1)
    row = {
        "decode_tps": timing.decode_tps,
        "ttft_ms": timing.ttft_s * 1000,
        **{
            f"{k}_cpu_ms_per_token": (_cpu_s(p) - before[k]) * 1000 / tokens
            for k, p in procs.items()
        },
    }
    if routed:
        row["tokens_per_frame"] = tokens / max(frames, 1)
    return row


def _summary(side: Side) -> dict[str, Any]:
    def med(rows: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(median([r[k] for r in rows]), 3) for k in rows[0]}

    direct, routed = med(side.direct), med(side.routed)
    return {
        "direct": direct,
        "routed": routed,
        "decode_ratio": round(routed["decode_tps"] / direct["decode_tps"], 4),
        "added_ttft_ms": round(routed["ttft_ms"] - direct["ttft_ms"], 1),
        "added_daemon_cpu_ms_per_token": round(
            routed["a_cpu_ms_per_token"]
            + routed["b_cpu_ms_per_token"]
            - direct["a_cpu_ms_per_token"]
            - direct["b_cpu_ms_per_token"],
            3,
        ),
    }


def daemons(models_dir: Path, reps: int, max_tokens: int, baseline: Path | None) -> dict[str, Any]:
    body = chat_body(DEFAULT_PROMPT, max_tokens)
    trees: dict[str, Path | None] = {"current": None}
    if baseline is not None:
        trees["baseline"] = baseline
    sides = {name: Side() for name in trees}
    with ExitStack() as stack, httpx.Client(timeout=600.0) as client:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="skulk-bench-ft-")))
        pairs = {
            name: stack.enter_context(_pair(models_dir, root / name, tree))
            for name, tree in trees.items()
        }
        for a, b in pairs.values():
            place(a, [b], context_tokens=2048, excluded_nodes=[_node_id(a)])
            for routed in (False, True):  # warm both paths
                _measure(client, a, b, routed, body)
        for rep in range(reps):
            names = list(pairs) if rep % 2 == 0 else list(reversed(pairs))
            for name in names:
                a, b = pairs[name]
                order = [False, True] if rep % 2 == 0 else [True, False]
                for routed in order:
                    row = _measure(client, a, b, routed, body)
                    (sides[name].routed if routed else sides[name].direct).append(row)
                    print(
                        f"rep {rep + 1}/{reps} {name} {'routed' if routed else 'direct'}: "
                        f"{row['decode_tps']:.1f} tok/s, TTFT {row['ttft_ms']:.1f} ms, "
                        f"load {os.getloadavg()[0]:.1f}",
                        file=sys.stderr,
                    )
    return {name: _summary(side) for name, side in sides.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sections", nargs="+", default=["hops", "daemons"])
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens per hop (hops)")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--baseline-tree", type=Path, default=None)
    add_run_options(parser)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"benchmark": "fabric_tokens"}
    load_at_start = os.getloadavg()[0]
    if "hops" in args.sections:
        result = hops(args.tokens)
        report["hops"] = result
        print("per token, one frame per token (us of one thread):")
        for name, value in result["per_token"].items():
            print(f"  {name:<22}{value:>8.2f}")
        print("end to end through CURVE ZeroMQ on loopback, by tokens per frame:")
        for size, row in result["end_to_end_by_tokens_per_frame"].items():
            print(
                f"  {size:>3}/frame: {row['cpu_us_per_token']:>7.1f} us CPU/token "
                f"(event loop {row['loop_thread_us_per_token']:.1f}, ZeroMQ I/O threads "
                f"{row['io_threads_us_per_token']:.1f}), {row['wall_us_per_token']:>7.1f} us "
                f"wall/token; transport.send alone {row['transport_send_us_per_frame']:.1f} "
                "us/frame"
            )
    if "daemons" in args.sections:
        load_at_start = wait_for_quiet(args.max_load)
        result = daemons(args.models_dir, args.reps, args.max_tokens, args.baseline_tree)
        report["daemons"] = result
        for name, row in result.items():
            print(
                f"{name}: routed/direct decode {row['decode_ratio']:.3f}x "
                f"({row['routed']['decode_tps']:.1f} vs {row['direct']['decode_tps']:.1f} tok/s), "
                f"first token {row['added_ttft_ms']:+.1f} ms, daemons' CPU "
                f"+{row['added_daemon_cpu_ms_per_token']:.3f} ms/token, "
                f"{row['routed'].get('tokens_per_frame', 0):.2f} tokens/frame"
            )
    if args.json:
        report.update(machine=machine(), load_at_start=round(load_at_start, 2))
        print_json(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
