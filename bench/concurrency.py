"""Concurrent streams: Skulk against llama.cpp's own ``llama-server``.

Both serve the demo model (Gemma 3 270M Q4_K_M) with the same engine version
(llama.cpp as vendored in llama-cpp-python 0.3.36; build the server with
``bench/build_llama_server.sh``), the same number of slots (4), the same context
per slot, the same threads (all cores), batch 512, continuous batching, a
non-unified KV cache and a full-size SWA cache (Skulk's engine settings), and
the same rendering of the turns (the demo is a base card: plain text, no chat
template). Both keep prompts between requests (the server's
prompt cache on, its default; Skulk reuses any common prefix by default).

At each level N (default 1, 4, 8) N streaming chat completions with the same
messages (each side renders them as plain text), greedy, ``--max-tokens``
tokens, are started at once. The aggregate decode rate of a round is every
stream's tokens after its first, over the time from the earliest first token to
the latest last token. Rounds alternate between the two servers (ABBA), both
servers stay loaded, and each side is measured with the other quiescent (see
``bench/_isolation.py``: a round waits ``--gap`` seconds and until both servers'
CPU time is flat, records the load average, and fails loudly when the idle server
spent CPU during the other's round). Each level's figure is the median of
``--reps`` rounds, printed with its spread.

Target: Skulk/llama-server aggregate ratio >= 1.0 at every level.

Run from the repository root::

    bench/build_llama_server.sh            # once, several minutes
    .venv/bin/python -m bench.concurrency [--levels 1 4 8 16 32] [--reps 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/concurrency.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    BUILD_DIR,
    DEFAULT_PROMPT,
    StreamTiming,
    add_run_options,
    chat_body,
    cpu_count,
    demo_model_path,
    machine,
    median,
    print_json,
    skulk_serving,
    stream_chat_async,
    wait_for_quiet,
)
from bench._isolation import Isolation, Side, children_with, daemon_side, spread, spread_text
from tests.daemon_process import free_port

RATIO_TARGET: Final = 1.0
SLOTS: Final = 4  # Skulk's default (skulk_daemon.engines.base.DEFAULT_SLOTS)
N_BATCH: Final = 512  # Skulk's engine n_batch / n_ubatch
DEFAULT_LLAMA_SERVER: Final = BUILD_DIR / "bin" / "llama-server"
SERVER_READY_TIMEOUT_S: Final = 120.0


@dataclass(frozen=True)
class Round:
    """One level's streams, run together against one server."""

    streams: list[StreamTiming]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.streams)

    @property
    def agg_decode_tps(self) -> float:
        span = max(s.last_token_at for s in self.streams) - min(
            s.first_token_at for s in self.streams
        )
        return sum(s.tokens - 1 for s in self.streams) / span

    @property
    def end_to_end_tps(self) -> float:
        """All tokens over the time from sending to the last token (prefill and queueing in)."""
        span = max(s.last_token_at for s in self.streams) - min(s.sent_at for s in self.streams)
        return self.tokens / span

    @property
    def median_ttft_ms(self) -> float:
        return median([s.ttft_s * 1000.0 for s in self.streams])


PLAIN_PROMPT_TEMPLATE: Final = (
    "{% for m in messages %}{% if not loop.first and m.role != 'assistant' %}"
    "{{ '\\n' }}{% endif %}{{ m.content }}{% endfor %}"
)
"""What Skulk renders for the demo, a base card (``chat.prompt.plain_prompt``):
the turns as written, each but a reply on a new line, no chat template. The
server adds BOS as a token, as Skulk does."""
PROMPT_CACHE_ON: Final = ("--cache-prompt", "--cache-ram", "8192", "--ctx-checkpoints", "32")
"""The server's own prompt-cache defaults, restated after :func:`llama_server`'s
cache-off flags (the last of a repeated flag wins)."""


@contextmanager
def llama_server(
    binary: Path,
    model: Path,
    context_tokens: int,
    log_path: Path,
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """``llama-server`` on a free port, configured like Skulk's engine (plus
    ``extra_args``, e.g. an RPC split); yields its URL."""
    if not binary.exists():
        raise SystemExit(f"{binary} not found: run bench/build_llama_server.sh first")
    threads = str(cpu_count())
    port = free_port()
    template = log_path.parent / "plain-prompt-template.jinja"
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(PLAIN_PROMPT_TEMPLATE)
    argv = [
        str(binary),
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--ctx-size", str(context_tokens * SLOTS),
        "--parallel", str(SLOTS),
        "--cont-batching",
        "--no-kv-unified",
        "--swa-full",
        "--threads", threads,
        "--threads-batch", threads,
        "--batch-size", str(N_BATCH),
        "--ubatch-size", str(N_BATCH),
        # The demo is a base card: give the server a Jinja template that renders
        # the turns as Skulk does (plain text; the server adds BOS as a token, as
        # Skulk does: both see the same prompt tokens).
        "--jinja",
        "--chat-template-file", str(template),
        "--no-cache-prompt",
        "--cache-ram", "0",
        "--ctx-checkpoints", "0",
        "--no-webui",
        *extra_args,
    ]  # fmt: skip
    with log_path.open("w") as log:
        # NOTE: its own session, so a signal meant for the terminal's (or a job
        # runner's) process group cannot stop the server in the middle of a run.
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
            while True:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"llama-server exited with {process.returncode}; see {log_path}"
                    )
                try:
                    if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"llama-server did not become healthy; see {log_path}")
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def run_round(url: str, body: Mapping[str, Any], streams: int) -> Round:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:
        timings = await asyncio.gather(
            *(stream_chat_async(client, url, body) for _ in range(streams))
        )
    return Round(streams=list(timings))


def summarize(
    levels: list[int], skulk: dict[int, list[Round]], server: dict[int, list[Round]]
) -> list[dict[str, Any]]:
    rows = []
    for level in levels:
        s = median([r.agg_decode_tps for r in skulk[level]])
        p = median([r.agg_decode_tps for r in server[level]])
        rows.append(
            {
                "streams": level,
                "skulk_agg_tps": round(s, 2),
                "server_agg_tps": round(p, 2),
                "ratio": round(s / p, 4),
                "ok": s / p >= RATIO_TARGET,
                "skulk_agg_tps_all": [round(r.agg_decode_tps, 2) for r in skulk[level]],
                "server_agg_tps_all": [round(r.agg_decode_tps, 2) for r in server[level]],
                "skulk_agg_tps_spread": spread([r.agg_decode_tps for r in skulk[level]]),
                "server_agg_tps_spread": spread([r.agg_decode_tps for r in server[level]]),
                "skulk_e2e_tps": round(median([r.end_to_end_tps for r in skulk[level]]), 2),
                "server_e2e_tps": round(median([r.end_to_end_tps for r in server[level]]), 2),
                "skulk_ttft_ms": round(median([r.median_ttft_ms for r in skulk[level]]), 1),
                "server_ttft_ms": round(median([r.median_ttft_ms for r in server[level]]), 1),
                "skulk_tokens": sorted({s.tokens for r in skulk[level] for s in r.streams}),
                "server_tokens": sorted({s.tokens for r in server[level] for s in r.streams}),
                "skulk_prompt_tokens": sorted(
                    {s.prompt_tokens for r in skulk[level] for s in r.streams}
                ),
                "server_prompt_tokens": sorted(
                    {s.prompt_tokens for r in server[level] for s in r.streams}
                ),
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'streams':>7}{'Skulk agg tok/s':>17}{'llama-server agg tok/s':>24}{'ratio':>8}"
        f"{'':>6}{'TTFT ms skulk/server':>22}"
    )
    for row in rows:
        ttft = f"{row['skulk_ttft_ms']:.0f}/{row['server_ttft_ms']:.0f}"
        print(
            f"{row['streams']:>7}{row['skulk_agg_tps']:>17.2f}{row['server_agg_tps']:>24.2f}"
            f"{row['ratio']:>8.3f}{'ok' if row['ok'] else 'MISS':>6}{ttft:>22}"
        )
    print(f"target: ratio >= {RATIO_TARGET:g} at every level")
    for row in rows:
        print(
            f"spread at {row['streams']} streams, agg tok/s: Skulk "
            f"{spread_text(row['skulk_agg_tps_all'])}, llama-server "
            f"{spread_text(row['server_agg_tps_all'])}"
        )
    for row in rows:
        if row["skulk_tokens"] != row["server_tokens"] or (
            row["skulk_prompt_tokens"] != row["server_prompt_tokens"]
        ):
            print(
                f"note: at {row['streams']} streams token counts differ: completion "
                f"{row['skulk_tokens']} vs {row['server_tokens']}, prompt "
                f"{row['skulk_prompt_tokens']} vs {row['server_prompt_tokens']}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--reps", type=int, default=3, help="measured rounds per level and side")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=1024, help="context tokens per slot")
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between rounds")
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)

    body = chat_body(args.prompt, args.max_tokens)
    skulk: dict[int, list[Round]] = {level: [] for level in args.levels}
    server: dict[int, list[Round]] = {level: [] for level in args.levels}
    with skulk_serving(args.models_dir, args.context) as daemon:
        model = demo_model_path(args.models_dir)
        with llama_server(
            args.llama_server,
            model,
            args.context,
            BUILD_DIR / "logs" / "llama-server.log",
            extra_args=PROMPT_CACHE_ON,
        ) as server_url:
            sides = {"skulk": daemon.url, "server": server_url}
            isolation = Isolation(
                [
                    daemon_side("skulk", daemon.process),
                    Side("server", children_with(server_url.rsplit(":", 1)[1])),
                ],
                gap_s=args.gap,
            )
            # Warm both up (first-request costs, page cache) with a full-width round.
            for url in sides.values():
                asyncio.run(run_round(url, body, max(args.levels)))
            for rep in range(args.reps):
                for index, level in enumerate(args.levels):
                    order = ["skulk", "server"] if (rep + index) % 2 == 0 else ["server", "skulk"]
                    for side in order:
                        url = sides[side]

                        def measure(url: str = url, level: int = level) -> Round:
                            return asyncio.run(run_round(url, body, level))

                        result = isolation.run(side, measure)
                        (skulk if side == "skulk" else server)[level].append(result)
                        print(
                            f"rep {rep + 1}/{args.reps} {level} streams {side}: "
                            f"{result.agg_decode_tps:.1f} tok/s",
                            file=sys.stderr,
                        )
    rows = summarize(args.levels, skulk, server)
    print_table(rows)
    if args.json:
        print_json(
            {
                "benchmark": "concurrency",
                "levels": rows,
                "all_ok": all(row["ok"] for row in rows),
                "slots": SLOTS,
                "max_tokens": args.max_tokens,
                "context": args.context,
                "reps": args.reps,
                "threads": cpu_count(),
                "machine": machine(),
                "load_at_start": round(load_at_start, 2),
                "isolation": isolation.report(),
            }
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
