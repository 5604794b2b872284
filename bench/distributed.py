"""Serving across nodes on one machine: request routing and llama.cpp RPC pooling.

Two Skulk daemons on loopback (explicit peers, one cluster key), the demo model
(Gemma 3 270M Q4_K_M), greedy streaming chat completions of ``--max-tokens``.

* ``routing``: the model placed on node B only. The same request is sent to B's
  API (served locally) and to A's API (dispatched to B's runner, tokens streamed
  back over the fabric's data plane), alternating ABBA. Figures: decode tokens/s
  (after the first token) and time to first token. Targets (issue #19): through
  A >= 0.97x B's decode rate, and <= 5 ms more to the first token. Where the
  extra time goes, hop by hop: ``bench/fabric_tokens.py``.
* ``pool``: the model on one node, then pooled over both (``min_nodes: 2``: a
  ``LlamaRpcInstance``, the driver holding the first layers, the donor the rest
  through llama.cpp's RPC server behind Skulk's gate). Peer: llama.cpp's own
  ``llama-server`` driving the same split over ``ggml-rpc-server`` (``--rpc``,
  ``-ngl``, the token embeddings kept on the driver with ``-ot``), with the same
  slots, context, threads and template. Rounds of 1 and ``--streams`` concurrent
  streams alternate between Skulk's pool and the server. Target: Skulk's pool
  >= 1.0x llama-server's on the same split. A third side runs llama-server over
  the same authenticated path Skulk uses (a gate in front of the RPC server, a
  local gate client on the driver: ``runner/rpc_gate.py``), which separates the
  engine's figure from the cost of refusing peers outside the cluster.

Both daemons, the RPC donor and llama-server share this machine's cores, as the
issue's own reference figures did (two processes on two cores). Every measured run
starts ``--gap`` seconds after the last, once every side is idle, and the pool's
sides are checked quiescent while another runs (``bench/_isolation.py``: Skulk's
daemons and runners, each llama-server with its RPC server); a leak fails the run.
Routing's two sides are the same two daemons, so there each run only starts idle.

Run from the repository root::

    bench/build_llama_server.sh     # once: llama-server and ggml-rpc-server
    .venv/bin/python -m bench.distributed [--sections routing pool] [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import psutil

if __package__ in (None, ""):  # `python bench/distributed.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    BUILD_DIR,
    DEFAULT_PROMPT,
    DEMO_MODEL,
    READY_TIMEOUT_S,
    LoggedDaemon,
    add_run_options,
    chat_body,
    cpu_count,
    demo_model_path,
    machine,
    median,
    print_json,
    put_config,
    stream_chat,
    wait_for_quiet,
)
from bench._isolation import Isolation, Side, children_with, spread
from bench.concurrency import Round, llama_server, run_round
from skulk_daemon.runner.rpc_gate import GateClient, GateServer
from tests.daemon_process import free_port

ROUTING_DECODE_TARGET: Final = 0.97
ROUTING_TTFT_TARGET_MS: Final = 5.0
POOL_TARGET: Final = 1.0
DEFAULT_RPC_SERVER: Final = BUILD_DIR / "bin" / "ggml-rpc-server"
BENCH_ENV: Final = {"SKULK_MDNS": "0", "SKULK_CLUSTER_KEY": "skulk-bench-distributed-key-0001"}


def _wait(predicate: Any, what: str, daemons: list[LoggedDaemon]) -> Any:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    tails = "\n".join(d.log_tail() for d in daemons)
    raise RuntimeError(f"timed out waiting for {what}\n{tails}")


def _node_id(daemon: LoggedDaemon) -> str:
    value: str = daemon.get("/node_id").json()
    return value


@contextmanager
def two_nodes(models_dir: Path) -> Iterator[tuple[LoggedDaemon, LoggedDaemon]]:
    with tempfile.TemporaryDirectory(prefix="skulk-bench-dist-") as root:
        a = LoggedDaemon(root=Path(root) / "a", models_dir=models_dir, extra_env=dict(BENCH_ENV))
        b = LoggedDaemon(
            root=Path(root) / "b",
            models_dir=models_dir,
            peers=[a.fabric_address],
            extra_env=dict(BENCH_ENV),
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


def place(daemon: LoggedDaemon, others: list[LoggedDaemon], **fields: object) -> dict[str, Any]:
    placed = httpx.post(
        f"{daemon.url}/place_instance", json={"model_id": DEMO_MODEL, **fields}, timeout=60
    )
    if placed.status_code != 200:
        raise RuntimeError(f"place_instance: {placed.status_code} {placed.text}")
    instance_id = placed.json()["instance_id"]

    def ready() -> dict[str, Any] | None:
        state = daemon.get("/state").json()
        tagged = state["instances"].get(instance_id)
        if tagged is None:
            return None
        body: dict[str, Any] = next(iter(tagged.values()))
        runners = body["shardAssignments"]["nodeToRunner"].values()
        ok = all("RunnerReady" in state["runners"].get(r, {}) for r in runners)
        return body if ok else None

    body: dict[str, Any] = _wait(ready, "the instance to serve", [daemon, *others])
    body["instanceId"] = instance_id
    return body


def delete(daemon: LoggedDaemon, instance_id: str) -> None:
    httpx.delete(f"{daemon.url}/instance/{instance_id}", timeout=30).raise_for_status()


# -- routing ---------------------------------------------------------------------


def _daemons(a: LoggedDaemon, b: LoggedDaemon, name: str = "skulk") -> Side:
    """Both daemons with their runners, as one isolation side."""
    pids = [d.process.pid for d in (a, b) if d.process is not None]
    return Side(name, lambda: pids)


def _by_port(*addresses: str) -> Callable[[], Sequence[int]]:
    """The pids of this script's servers listening on ``addresses``' ports (a
    llama-server's URL, an RPC server's ``host:port``), as a :class:`Side`'s pids."""
    finders = [children_with(address.rstrip("/").rsplit(":", 1)[1]) for address in addresses]
    return lambda: [pid for find in finders for pid in find()]


def routing(
    a: LoggedDaemon,
    b: LoggedDaemon,
    *,
    reps: int,
    max_tokens: int,
    runner_threads: int | None,
    gap_s: float,
) -> dict[str, Any]:
    """``runner_threads`` (``inference.runner_threads`` on B) below the core count
    leaves the daemons a core, as two machines would have: on one machine every
    routed token wakes A's and B's loops and both ZeroMQ I/O threads while llama.cpp
    keeps its compute threads spinning on every core."""
    body = chat_body(DEFAULT_PROMPT, max_tokens)
    if runner_threads is not None:
        put_config(b, {"inference": {"runner_threads": runner_threads}})
    instance = place(a, [b], context_tokens=2048, excluded_nodes=[_node_id(a)])
    sides = {"direct": b.url, "routed": a.url}
    runs: dict[str, list[tuple[float, float]]] = {"direct": [], "routed": []}
    costs: dict[str, list[dict[str, float]]] = {"direct": [], "routed": []}
    with httpx.Client(timeout=600.0) as client:
        for url in sides.values():  # warm both paths
            stream_chat(client, url, body)
        groups = process_groups(a, b)
        isolation = Isolation([_daemons(a, b)], gap_s=gap_s)
        for rep in range(reps):
            order = ["direct", "routed"] if rep % 2 == 0 else ["routed", "direct"]
            for side in order:
                url = sides[side]
                before = cost_snapshot(groups)
                timing = isolation.run("skulk", lambda url=url: stream_chat(client, url, body))
                after = cost_snapshot(groups)
                costs[side].append(
                    {k: (after[k] - before[k]) / max(1, timing.tokens) for k in after}
                )
                runs[side].append((timing.decode_tps, timing.ttft_s * 1000))
                print(
                    f"routing rep {rep + 1}/{reps} {side}: {timing.decode_tps:.1f} tok/s, "
                    f"TTFT {timing.ttft_s * 1000:.1f} ms",
                    file=sys.stderr,
                )
    delete(a, instance["instanceId"])
    direct_tps = median([r[0] for r in runs["direct"]])
    routed_tps = median([r[0] for r in runs["routed"]])
    direct_ttft = median([r[1] for r in runs["direct"]])
    routed_ttft = median([r[1] for r in runs["routed"]])
    ratio = routed_tps / direct_tps
    added = routed_ttft - direct_ttft
    return {
        "direct_decode_tps": round(direct_tps, 2),
        "routed_decode_tps": round(routed_tps, 2),
        "decode_ratio": round(ratio, 4),
        "direct_ttft_ms": round(direct_ttft, 1),
        "routed_ttft_ms": round(routed_ttft, 1),
        "added_ttft_ms": round(added, 1),
        "ok": ratio >= ROUTING_DECODE_TARGET and added <= ROUTING_TTFT_TARGET_MS,
        "runner_threads": runner_threads,
        "spread": {
            f"{side}_{figure}": spread([r[i] for r in rows])
            for side, rows in runs.items()
            for i, figure in enumerate(("decode_tps", "ttft_ms"))
        },
        "isolation": isolation.report(),
        "per_token": {
            side: {k: round(median([c[k] for c in rows]), 3) for k in rows[0]}
            for side, rows in costs.items()
        },
        "runs": runs,
    }


# -- pooling ---------------------------------------------------------------------


@contextmanager
def gated(endpoint: str) -> Iterator[str]:
    """``endpoint`` behind Skulk's RPC gate (donor side) and a gate client (driver
    side), both in this process: the path a Skulk pool's RPC traffic takes."""
    host, port = endpoint.rsplit(":", 1)
    key = b"skulk-bench-gate-key-0000000000!"
    server = GateServer("127.0.0.1", 0, key=key, instance_id="bench")
    server.start((host, int(port)))
    client = GateClient(server.address, key=key, instance_id="bench", on_lost=lambda _: None)
    client.start()
    try:
        yield client.endpoint
    finally:
        client.close()
        server.close()


@contextmanager
def rpc_donor(binary: Path, log_path: Path) -> Iterator[str]:
    """llama.cpp's own ``ggml-rpc-server`` on a free loopback port."""
    if not binary.exists():
        raise SystemExit(f"{binary} not found: run bench/build_llama_server.sh first")
    port = free_port()
    argv = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--threads", str(cpu_count())]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            time.sleep(1.0)
            if process.poll() is not None:
                raise RuntimeError(f"ggml-rpc-server exited; see {log_path}")
            yield f"127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def donor_layers(pool: dict[str, Any]) -> int:
    for tagged in pool["shardAssignments"]["runnerToShard"].values():
        kind, shard = next(iter(tagged.items()))
        if kind == "RpcDonorShardMetadata":
            return int(shard["endLayer"]) - int(shard["startLayer"])
    raise RuntimeError("the pool has no donor shard")


def _cpu_s(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


def process_groups(a: LoggedDaemon, b: LoggedDaemon) -> dict[str, list[psutil.Process]]:
    """Every process a round can spend CPU in, by role: the two daemons, their
    runners (the pool's driver and donor), llama.cpp's own server and RPC servers,
    and this script (the client, and the gate of the gated side)."""
    me = psutil.Process()
    groups: dict[str, list[psutil.Process]] = {"client+gate": [me]}
    daemons: dict[int, str] = {}
    for label, daemon in (("daemon A", a), ("daemon B", b)):
        assert daemon.process is not None
        daemons[daemon.process.pid] = label
    for child in me.children():
        role = daemons.get(child.pid)
        if role is not None:
            groups[role] = [child]
            groups[f"runners {role[-1]}"] = child.children(recursive=True)
        elif child.name() in ("llama-server", "ggml-rpc-server"):
            groups.setdefault(child.name(), []).append(child)
    return groups


def cpu_snapshot(groups: dict[str, list[psutil.Process]]) -> dict[str, float]:
    return {label: sum(_cpu_s(p) for p in members) for label, members in groups.items()}


def _thread_waits(process: psutil.Process) -> tuple[int, float]:
    """Involuntary context switches of all of ``process``'s threads (psutil's figure
    is the main thread's alone), and their ms runnable but waiting for a core
    (``schedstat``'s second field)."""
    switches, waited_ns = 0, 0
    for task in Path(f"/proc/{process.pid}/task").glob("*"):
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    switches += int(line.split()[1])
            waited_ns += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return switches, waited_ns / 1e6


def cost_snapshot(groups: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU ms by process group, and how often B's runner threads were preempted
    and how long they waited for a core: a routed token's added cost on one
    machine is CPU the daemons take from the runner's compute threads."""
    snapshot = {f"{k} cpu ms": v * 1000 for k, v in cpu_snapshot(groups).items()}
    counts = [_thread_waits(p) for p in groups.get("runners B", [])]
    snapshot["runner B preempted"] = float(sum(c[0] for c in counts))
    snapshot["runner B queued ms"] = sum(c[1] for c in counts)
    return snapshot


def rounds(
    url: str,
    body: dict[str, Any],
    streams: int,
    *,
    reps: int,
    label: str,
    isolation: Isolation,
    side: str,
) -> list[Round]:
    """``reps`` rounds of ``streams`` concurrent streams, each an isolated run of ``side``."""
    done = []
    for rep in range(reps):
        result = isolation.run(side, lambda: asyncio.run(run_round(url, body, streams)))
        done.append(result)
        print(
            f"pool {label} rep {rep + 1}/{reps} {streams} stream(s): "
            f"{result.agg_decode_tps:.1f} tok/s",
            file=sys.stderr,
        )
    return done


def pool(
    a: LoggedDaemon,
    b: LoggedDaemon,
    *,
    reps: int,
    max_tokens: int,
    streams: int,
    context: int,
    models_dir: Path,
    llama_server_bin: Path,
    rpc_server_bin: Path,
    gap_s: float,
) -> dict[str, Any]:
    body = chat_body(DEFAULT_PROMPT, max_tokens)
    levels = sorted({1, streams})  # one stream, and the --streams level when it differs
    figures: dict[str, dict[int, list[Round]]] = {
        side: {n: [] for n in levels} for side in ("single", "pooled", "server", "server_gated")
    }
    cpu: dict[str, dict[int, dict[str, list[float]]]] = {
        side: {n: {} for n in levels} for side in ("pooled", "server", "server_gated")
    }
    single = place(a, [b], context_tokens=context, min_nodes=1)
    asyncio.run(run_round(a.url, body, streams))  # warm
    alone = Isolation([_daemons(a, b)], gap_s=gap_s)
    for n in levels:
        figures["single"][n] = rounds(
            a.url, body, n, reps=reps, label="one node", isolation=alone, side="skulk"
        )
    delete(a, single["instanceId"])
    pooled = place(a, [b], context_tokens=context, min_nodes=2)
    front = a if pooled["driverNodeId"] == _node_id(a) else b
    layers = donor_layers(pooled)
    model = demo_model_path(models_dir)
    logs = BUILD_DIR / "logs"
    with (
        rpc_donor(rpc_server_bin, logs / "ggml-rpc-server.log") as plain,
        rpc_donor(rpc_server_bin, logs / "ggml-rpc-server-gated.log") as behind_gate,
        gated(behind_gate) as gate,
    ):
        split = ["-ngl", str(layers + 1), "-ot", "token_embd=CPU"]
        with (
            llama_server(
                llama_server_bin, model, context, logs / "llama-server-rpc.log",
                ["--rpc", plain, *split],
            ) as server,
            llama_server(
                llama_server_bin, model, context, logs / "llama-server-rpc-gated.log",
                ["--rpc", gate, *split],
            ) as server_gated,
        ):  # fmt: skip
            sides = {"pooled": front.url, "server": server, "server_gated": server_gated}
            for url in sides.values():
                asyncio.run(run_round(url, body, streams))  # warm
            groups = process_groups(a, b)
            isolation = Isolation(
                [
                    _daemons(a, b, "pooled"),
                    Side("server", _by_port(server, plain)),
                    Side("server_gated", _by_port(server_gated, behind_gate)),
                ],
                gap_s=gap_s,
            )
            for rep in range(reps):
                for n in levels:
                    order = list(sides) if (rep + n) % 2 == 0 else list(reversed(sides))
                    for side in order:
                        before = cpu_snapshot(groups)
                        done = rounds(
                            sides[side], body, n, reps=1, label=side, isolation=isolation, side=side
                        )
                        after = cpu_snapshot(groups)
                        figures[side][n] += done
                        for label, seconds in after.items():
                            ms = (seconds - before[label]) * 1000.0 / done[0].tokens
                            cpu[side][n].setdefault(label, []).append(ms)
    delete(a, pooled["instanceId"])
    rows = []
    for n in levels:
        one = median([r.agg_decode_tps for r in figures["single"][n]])
        mine = median([r.agg_decode_tps for r in figures["pooled"][n]])
        theirs = median([r.agg_decode_tps for r in figures["server"][n]])
        theirs_gated = median([r.agg_decode_tps for r in figures["server_gated"][n]])
        rows.append(
            {
                "streams": n,
                "one_node_tps": round(one, 2),
                "pooled_tps": round(mine, 2),
                "llama_server_pooled_tps": round(theirs, 2),
                "pooled_over_one_node": round(mine / one, 4),
                "pooled_over_llama_server": round(mine / theirs, 4),
                "llama_server_gated_tps": round(theirs_gated, 2),
                "pooled_over_llama_server_gated": round(mine / theirs_gated, 4),
                "ok": mine / theirs >= POOL_TARGET,
                "spread": {
                    side: spread([r.agg_decode_tps for r in figures[side][n]]) for side in figures
                },
                "cpu_ms_per_token": {
                    side: {label: round(median(v), 3) for label, v in cpu[side][n].items()}
                    for side in cpu
                },
            }
        )
    return {
        "donor_layers": layers,
        "rows": rows,
        "isolation": {"one_node": alone.report(), "pooled": isolation.report()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sections", nargs="+", default=["routing", "pool"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--streams", type=int, default=4, help="concurrent streams (pool)")
    parser.add_argument("--context", type=int, default=1024, help="context tokens per slot")
    parser.add_argument(
        "--runner-threads",
        type=int,
        default=None,
        help="routing: B's runner threads (default: all cores)",
    )
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between runs")
    parser.add_argument("--llama-server", type=Path, default=BUILD_DIR / "bin" / "llama-server")
    parser.add_argument("--rpc-server", type=Path, default=DEFAULT_RPC_SERVER)
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)
    report: dict[str, Any] = {"benchmark": "distributed"}
    with two_nodes(args.models_dir) as (a, b):
        if "routing" in args.sections:
            result = routing(
                a,
                b,
                reps=args.reps,
                max_tokens=args.max_tokens,
                runner_threads=args.runner_threads,
                gap_s=args.gap,
            )
            report["routing"] = result
            print(
                f"routing: decode {result['routed_decode_tps']:.1f} vs "
                f"{result['direct_decode_tps']:.1f} tok/s ({result['decode_ratio']:.3f}x, "
                f"target >= {ROUTING_DECODE_TARGET}); first token {result['added_ttft_ms']:+.1f} "
                f"ms ({result['routed_ttft_ms']:.1f} vs {result['direct_ttft_ms']:.1f}, target "
                f"<= {ROUTING_TTFT_TARGET_MS:g}) {'ok' if result['ok'] else 'MISS'}"
            )
            for name, figure in result["spread"].items():
                print(
                    f"  {name}: {figure['median']:.2f} (p90 {figure['p90']:.2f}, "
                    f"{figure['min']:.2f}-{figure['max']:.2f})"
                )
            print("per token (median of the streams):")
            for side, per_token in result["per_token"].items():
                spent = ", ".join(f"{k} {v:.3f}" for k, v in per_token.items() if v >= 0.001)
                print(f"  {side:>6}: {spent}")
        if "pool" in args.sections:
            result = pool(
                a,
                b,
                reps=args.reps,
                max_tokens=args.max_tokens,
                streams=args.streams,
                context=args.context,
                models_dir=args.models_dir,
                llama_server_bin=args.llama_server,
                rpc_server_bin=args.rpc_server,
                gap_s=args.gap,
            )
            report["pool"] = result
            print(f"pool (donor holds {result['donor_layers']} layers):")
            print(
                f"{'streams':>7}{'one node':>10}{'Skulk pool':>12}{'llama-server pool':>19}"
                f"{'(gated)':>9}{'pool/one':>10}{'pool/server':>13}{'pool/gated':>12}"
            )
            for row in result["rows"]:
                print(
                    f"{row['streams']:>7}{row['one_node_tps']:>10.1f}{row['pooled_tps']:>12.1f}"
                    f"{row['llama_server_pooled_tps']:>19.1f}"
                    f"{row['llama_server_gated_tps']:>9.1f}{row['pooled_over_one_node']:>10.3f}"
                    f"{row['pooled_over_llama_server']:>13.3f}"
                    f"{row['pooled_over_llama_server_gated']:>12.3f}"
                    f" {'ok' if row['ok'] else 'MISS'}"
                )
            print(f"target: Skulk pool / llama-server pool >= {POOL_TARGET:g}")
            for row in result["rows"]:
                for side, figure in row["spread"].items():
                    print(
                        f"  {row['streams']} stream(s) {side}: {figure['median']:.2f} tok/s "
                        f"(p90 {figure['p90']:.2f}, {figure['min']:.2f}-{figure['max']:.2f})"
                    )
            print("CPU ms per token, by process (median of the rounds):")
            for row in result["rows"]:
                for side, by_process in row["cpu_ms_per_token"].items():
                    spent = ", ".join(f"{k} {v:.2f}" for k, v in by_process.items() if v >= 0.01)
                    total = sum(by_process.values())
                    print(f"  {row['streams']} stream(s) {side:>12}: total {total:.2f}: {spent}")
    if args.json:
        report.update(machine=machine(), load_at_start=round(load_at_start, 2), threads=cpu_count())
        print_json(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
