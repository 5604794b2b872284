"""Multi-turn conversations: Skulk's prefix reuse against ``llama-server``'s prompt cache.

Both serve the demo model with the settings of ``bench/concurrency.py`` (4 slots,
the same threads, batch 512, non-unified KV, full-size SWA cache, the turns
rendered as Skulk renders them for the demo's base card), except that the server
keeps its prompt cache on, its default (``--cache-prompt``, RAM cache and context
checkpoints at their defaults).

1. **One conversation, 8 turns.** A ~230-token system prompt, then every turn
   adds ~150 tokens of user text and asks for a 24-token reply (streamed, greedy
   unless ``--temperature`` samples it); each side's own replies go into its
   history. TTFT per turn. The next turn goes out as soon as a reply ends, unless
   ``--think-ms`` pauses first, as a person reading and typing would (Skulk settles
   a greedy reply after ``inference.settle_idle_ms`` idle, 500 by default).
2. **Four conversations at once, one system prompt.** Four first turns that share
   the system prompt (each with its own user text) start together. Reports the
   aggregate TTFT (mean over the four) and Skulk's own prefill counter: the prompt
   tokens each request prefilled (``prompt_tokens - cached_tokens`` from its
   ``: generation_stats``), against the server's ``prompt_n``.

Every repetition starts with a system prompt no earlier request sent (a fresh
seed), so turn 1 is cold on both sides. Repetitions alternate which side goes
first (ABBA), each side measured with the other quiescent (``bench/_isolation.py``:
a settle still running after Skulk's side would fail the run, not slow the
server's); figures are medians over ``--reps``.

Targets (issue 19): turn-8 TTFT <= 1.0x the server's; Skulk's turn 8 / turn 1
<= 1.3; four shared conversations: aggregate TTFT <= 0.8x the server's.

Run from the repository root::

    bench/build_llama_server.sh            # once, several minutes
    .venv/bin/python -m bench.multi_turn [--reps 3] [--json] [--skulk-only]
        [--temperature 0.8] [--bit-exact] [--think-ms 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/multi_turn.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    BUILD_DIR,
    DEMO_MODEL,
    StreamTiming,
    add_run_options,
    cpu_count,
    demo_model_path,
    machine,
    median,
    print_json,
    skulk_serving,
    stream_chat_async,
    wait_for_quiet,
)
from bench._isolation import Isolation, children_with, spread, spread_text
from bench._isolation import Side as Processes
from bench.concurrency import DEFAULT_LLAMA_SERVER, PROMPT_CACHE_ON, llama_server

TURNS: Final = 8
SYSTEM_WORDS: Final = 220  # about 230 tokens
USER_WORDS: Final = 145  # about 150 tokens
REPLY_TOKENS: Final = 24
CONVERSATIONS: Final = 4
CONTEXT: Final = 2048
TURN8_TARGET: Final = 1.0
GROWTH_TARGET: Final = 1.3
SHARED_TARGET: Final = 0.8
SERVER_ATTEMPTS: Final = 4
# NOTE: a connection per request, on both sides. llama-server (cpp-httplib) now and
# then closes a kept-alive connection just as the next request goes out on it
# ("Server disconnected without sending a response"); on loopback a new connection
# costs well under a millisecond of the hundreds a turn's TTFT takes.
FRESH_CONNECTIONS: Final = httpx.Limits(max_keepalive_connections=0)
SERVER_CACHE_ON: Final = PROMPT_CACHE_ON

_VOCABULARY: Final = (
    "the sea wind light ship harbour keeper storm rock wave night morning bottle letter "
    "north south east west river stone tower lamp glass step door road town market boat "
    "sail rope net fish bird cloud rain fog sun moon star tide shore island bay cliff "
    "sand grass tree field hill house window table chair bread water fire smoke iron "
    "salt map clock bell song story name year winter spring summer autumn friend brother "
    "sister mother father child old young quiet loud slow quick dark bright cold warm "
    "long short far near under over between behind before after again always never often"
)
_WORDS: Final = tuple(_VOCABULARY.split())


def words(seed: str, count: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(count)) + "."


class Timed(StreamTiming):
    """A stream timing that also keeps llama-server's ``timings`` (cache_n, prompt_n)."""

    server_timings: dict[str, Any] | None = None

    def feed(self, line: str, now: float) -> None:
        if line.startswith("data: {"):
            frame = json.loads(line[len("data: ") :])
            if isinstance(frame.get("timings"), dict):
                self.server_timings = frame["timings"]
        super().feed(line, now)

    @property
    def prefilled(self) -> int | None:
        """Prompt tokens this request decoded (the rest came from a cache)."""
        if self.stats is not None and "cached_tokens" in self.stats:
            return int(self.stats["prompt_tokens"]) - int(self.stats["cached_tokens"])
        if self.server_timings is not None:
            return int(self.server_timings.get("prompt_n", 0))
        return None


def body(messages: list[dict[str, str]], temperature: float) -> dict[str, Any]:
    return {
        "model": DEMO_MODEL,
        "messages": messages,
        "max_tokens": REPLY_TOKENS,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream(client: httpx.AsyncClient, url: str, payload: Mapping[str, Any]) -> Timed:
    return await stream_chat_async(client, url, payload, Timed)


async def conversation(url: str, seed: str, temperature: float, think_s: float) -> list[Timed]:
    messages = [{"role": "system", "content": words(f"{seed}/system", SYSTEM_WORDS)}]
    turns: list[Timed] = []
    async with httpx.AsyncClient(timeout=600.0, limits=FRESH_CONNECTIONS) as client:
        for turn in range(TURNS):
            if turn and think_s:
                await asyncio.sleep(think_s)
            messages.append({"role": "user", "content": words(f"{seed}/user{turn}", USER_WORDS)})
            timing = await stream(client, url, body(messages, temperature))
            messages.append({"role": "assistant", "content": "".join(timing.text)})
            turns.append(timing)
    return turns


async def shared_start(url: str, seed: str, temperature: float) -> list[Timed]:
    system = {"role": "system", "content": words(f"{seed}/system", SYSTEM_WORDS)}
    limits = httpx.Limits(max_connections=CONVERSATIONS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:
        return list(
            await asyncio.gather(
                *(
                    stream(
                        client,
                        url,
                        body(
                            [
                                system,
                                {"role": "user", "content": words(f"{seed}/c{i}", USER_WORDS)},
                            ],
                            temperature,
                        ),
                    )
                    for i in range(CONVERSATIONS)
                )
            )
        )


@dataclass
class Side:
    turns: list[list[Timed]]
    shared: list[list[Timed]]

    def turn_ttfts_ms(self, turn: int) -> list[float]:
        """Turn ``turn``'s time to first token in each repetition."""
        return [run[turn].ttft_s * 1000.0 for run in self.turns]

    def turn_ttft_ms(self, turn: int) -> float:
        return median(self.turn_ttfts_ms(turn))

    def shared_ttfts_ms(self) -> list[float]:
        """Each repetition's mean time to first token over its four conversations."""
        return [sum(t.ttft_s for t in run) * 1000.0 / len(run) for run in self.shared]

    def shared_ttft_ms(self) -> float:
        return median(self.shared_ttfts_ms())


def run_side(url: str, seed: str, side: Side, temperature: float, think_s: float = 0.0) -> None:
    side.turns.append(asyncio.run(conversation(url, f"{seed}/talk", temperature, think_s)))
    side.shared.append(asyncio.run(shared_start(url, f"{seed}/shared", temperature)))


class ServerPeer:
    """``llama-server``, warmed up, and restarted when it goes away.

    On this build the server sometimes shuts itself down in the middle of a
    conversation (it logs "cleaning up before exit" and nothing else), at a turn
    that depends on the text. A repetition it drops is run again on a fresh server
    with other seeded text of the same sizes; every repetition starts from prompts
    nobody sent before anyway, so that measures the same thing."""

    def __init__(
        self, binary: Path, model: Path, stack: ExitStack, temperature: float, think_s: float
    ) -> None:
        self._binary = binary
        self._model = model
        self._stack = stack
        self._temperature = temperature
        self._think_s = think_s
        self._url: str | None = None
        self.restarts = 0

    def _start(self) -> str:
        self._stack.close()
        log = BUILD_DIR / "logs" / f"llama-server-multi-turn-{self.restarts}.log"
        url = self._stack.enter_context(
            llama_server(self._binary, self._model, CONTEXT, log, extra_args=SERVER_CACHE_ON)
        )
        run_side(url, f"warm-up/{self.restarts}", Side([], []), self._temperature)
        return url

    def run(self, seed: str, side: Side) -> None:
        for attempt in range(SERVER_ATTEMPTS):
            attempt_seed = seed if attempt == 0 else f"{seed}/retry{attempt}"
            result = Side([], [])
            try:
                if self._url is None:
                    self._url = self._start()
                run_side(self._url, attempt_seed, result, self._temperature, self._think_s)
            except httpx.TransportError as exc:
                print(f"llama-server went away ({exc!r}); restarting it", file=sys.stderr)
                self._url = None
                self.restarts += 1
                continue
            side.turns += result.turns
            side.shared += result.shared
            return
        raise RuntimeError(f"llama-server went away {SERVER_ATTEMPTS} times in a row")


def report(skulk: Side, server: Side | None) -> dict[str, Any]:
    per_turn = [
        {
            "turn": turn + 1,
            "skulk_ttft_ms": round(skulk.turn_ttft_ms(turn), 1),
            "server_ttft_ms": round(server.turn_ttft_ms(turn), 1) if server else None,
            "prompt_tokens": skulk.turns[-1][turn].prompt_tokens,
            "skulk_prefilled": skulk.turns[-1][turn].prefilled,
            "server_prefilled": server.turns[-1][turn].prefilled if server else None,
        }
        for turn in range(TURNS)
    ]
    last = skulk.turn_ttft_ms(TURNS - 1)
    shared_runs = skulk.shared[-1]
    out: dict[str, Any] = {
        "turns": per_turn,
        "skulk_turn8_over_turn1": round(last / skulk.turn_ttft_ms(0), 3),
        "shared_skulk_ttft_ms": round(skulk.shared_ttft_ms(), 1),
        "shared_skulk_prompt_tokens": sum(t.prompt_tokens for t in shared_runs),
        "shared_skulk_prefilled": sum(t.prefilled or 0 for t in shared_runs),
        "shared_prompt_tokens_each": [t.prompt_tokens for t in shared_runs],
        "shared_skulk_ttft_each_ms": [round(t.ttft_s * 1000.0) for t in shared_runs],
        "runs_ms": {
            "skulk_turn8": [round(v, 1) for v in skulk.turn_ttfts_ms(TURNS - 1)],
            "skulk_shared": [round(v, 1) for v in skulk.shared_ttfts_ms()],
        },
    }
    if server is not None:
        out["turn8_skulk_over_server"] = round(last / server.turn_ttft_ms(TURNS - 1), 3)
        out["shared_server_ttft_ms"] = round(server.shared_ttft_ms(), 1)
        out["shared_skulk_over_server"] = round(skulk.shared_ttft_ms() / server.shared_ttft_ms(), 3)
        out["shared_server_prefilled"] = sum(t.prefilled or 0 for t in server.shared[-1])
        out["runs_ms"]["server_turn8"] = [round(v, 1) for v in server.turn_ttfts_ms(TURNS - 1)]
        out["runs_ms"]["server_shared"] = [round(v, 1) for v in server.shared_ttfts_ms()]
    out["spread_ms"] = {name: spread(values) for name, values in out["runs_ms"].items()}
    return out


def print_report(out: dict[str, Any]) -> None:
    print(
        f"{'turn':>4}{'prompt':>8}{'Skulk TTFT ms':>15}{'server TTFT ms':>16}"
        f"{'prefilled S/srv':>17}"
    )
    for row in out["turns"]:
        server = "-" if row["server_ttft_ms"] is None else f"{row['server_ttft_ms']:.0f}"
        prefilled = f"{row['skulk_prefilled']}/{row['server_prefilled'] or '-'}"
        print(
            f"{row['turn']:>4}{row['prompt_tokens']:>8}{row['skulk_ttft_ms']:>15.0f}"
            f"{server:>16}{prefilled:>17}"
        )
    growth = out["skulk_turn8_over_turn1"]
    print(f"Skulk turn 8 / turn 1: {growth:.3f} (target <= {GROWTH_TARGET})")
    if "turn8_skulk_over_server" in out:
        ratio = out["turn8_skulk_over_server"]
        print(f"turn 8 Skulk / llama-server: {ratio:.3f} (target <= {TURN8_TARGET})")
    for name, values in out["runs_ms"].items():
        print(f"  {name.replace('_', ' ')} TTFT ms over the repetitions: {spread_text(values)}")
    print(
        f"4 conversations, one system prompt: Skulk prefilled {out['shared_skulk_prefilled']} "
        f"of {out['shared_skulk_prompt_tokens']} prompt tokens "
        f"(each prompt {out['shared_prompt_tokens_each']}); mean TTFT "
        f"{out['shared_skulk_ttft_ms']:.0f} ms"
    )
    if "shared_skulk_over_server" in out:
        print(
            f"  llama-server prefilled {out['shared_server_prefilled']}, mean TTFT "
            f"{out['shared_server_ttft_ms']:.0f} ms; ratio {out['shared_skulk_over_server']:.3f} "
            f"(target <= {SHARED_TARGET})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    parser.add_argument("--skulk-only", action="store_true", help="no llama-server side")
    parser.add_argument(
        "--bit-exact",
        action="store_true",
        help="run Skulk in the bit-exact mode (inference.reuse_replies: false; the settle)",
    )
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between sides")
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="sample the replies (unseeded) instead of greedy: Skulk then reuses reply cells",
    )
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="pause before each turn after the first, as a person would (both sides)",
    )
    parser.add_argument(
        "--settle-idle-ms",
        type=int,
        default=None,
        help="Skulk's inference.settle_idle_ms (default: the daemon's own; 0: never settle)",
    )
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)

    skulk = Side([], [])
    server = None if args.skulk_only else Side([], [])
    restarts = 0
    isolation_report: dict[str, Any] | None = None
    inference: dict[str, object] = {}
    if args.bit_exact:
        inference["reuse_replies"] = False
    if args.settle_idle_ms is not None:
        inference["settle_idle_ms"] = args.settle_idle_ms
    config = {"inference": inference} if inference else None
    think_s = args.think_ms / 1000
    with skulk_serving(args.models_dir, CONTEXT, config) as daemon:
        temperature = args.temperature
        if server is None:
            run_side(daemon.url, "warm-up", Side([], []), temperature)
            for rep in range(args.reps):
                run_side(daemon.url, f"rep{rep}", skulk, temperature, think_s)
                print(f"rep {rep + 1}/{args.reps} skulk done", file=sys.stderr)
        else:
            run_side(daemon.url, "warm-up", Side([], []), temperature)
            with ExitStack() as stack:
                model = demo_model_path(args.models_dir)
                peer = ServerPeer(args.llama_server, model, stack, temperature, think_s)
                process = daemon.process
                assert process is not None
                isolation = Isolation(
                    [
                        Processes("skulk", lambda: [process.pid]),
                        Processes("server", children_with("--chat-template-file")),
                    ],
                    gap_s=args.gap,
                )
                for rep in range(args.reps):
                    order = ["skulk", "server"] if rep % 2 == 0 else ["server", "skulk"]
                    for name in order:
                        seed = f"rep{rep}"

                        def measure(name: str = name, seed: str = seed) -> None:
                            if name == "skulk":
                                run_side(daemon.url, seed, skulk, temperature, think_s)
                            else:
                                assert server is not None
                                peer.run(seed, server)

                        isolation.run(name, measure)
                        print(f"rep {rep + 1}/{args.reps} {name} done", file=sys.stderr)
                restarts = peer.restarts
                isolation_report = isolation.report()
    out = report(skulk, server)
    print_report(out)
    if args.json:
        print_json(
            {
                "benchmark": "multi_turn",
                **out,
                "reps": args.reps,
                "bit_exact": args.bit_exact,
                "temperature": args.temperature,
                "think_ms": args.think_ms,
                "settle_idle_ms": args.settle_idle_ms,
                "server_restarts": restarts,
                "isolation": isolation_report,
                "context": CONTEXT,
                "threads": cpu_count(),
                "machine": machine(),
                "load_at_start": round(load_at_start, 2),
            }
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
