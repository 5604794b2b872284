"""One stream: Skulk's streaming HTTP API against raw llama-cpp-python in-process.

Both sides run the demo model (Gemma 3 270M Q4_K_M) on the same prompt, rendered
as Skulk renders it for the demo's base card (BOS and the text), greedy
(temperature 0), ``--max-tokens`` tokens, all cores. Each repetition's prompt
opens with its own number, so both sides prefill it whole (both reuse a common
prefix, as every peer does: here only BOS and the prompt's first word). They run
alternately, never at once, in an ABBA order, each side measured with the other
quiescent (see ``bench/_isolation.py``: every run waits ``--gap`` seconds and
until both sides' CPU time is flat, records the load average, and fails loudly
when the idle side spent CPU while the other was measured). After ``--warmup``
discarded pairs, ``--reps`` pairs are measured and their medians compared, with
each side's spread (p90, min-max):

* TTFT: raw, from just before tokenizing to the first generated token; Skulk,
  from sending the request to the first SSE frame carrying text.
* decode tokens/s: tokens after the first over the time from the first to the last.

Targets (issue 43): Skulk/raw decode ratio >= 0.98, Skulk - raw TTFT <= 10 ms
(median; <= 20 ms at p90).

``--non-streaming`` measures the first token without a stream: a one-token request
(``max_tokens`` 1, ``"stream": false``), from sending it to the whole JSON answer,
against raw generating one token (tokenize, prefill, sample, detokenize). The same
isolation, pairs and targets; no decode figure.

Run from the repository root::

    .venv/bin/python -m bench.single_stream [--reps 7] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/single_stream.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
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
    stream_chat,
    wait_for_quiet,
)
from bench._isolation import Isolation, daemon_side, in_process_side, spread, spread_text

DECODE_RATIO_TARGET: Final = 0.98
TTFT_DELTA_TARGET_MS: Final = 10.0
TTFT_DELTA_P90_TARGET_MS: Final = 20.0
# What Skulk renders for one user message to the demo, a base card: BOS and the
# text as written, no chat template (``skulk_daemon.chat.prompt.plain_prompt``).
DEMO_PROMPT: Final = "<bos>{prompt}"


@dataclass(frozen=True)
class Sample:
    ttft_ms: float
    decode_tps: float
    tokens: int
    prompt_tokens: int
    text: str
    engine_tps: float | None = None  # Skulk only: the runner's own generation_tps


class RawLlama:
    """llama-cpp-python's high-level ``Llama``, streaming token by token."""

    def __init__(self, model_path: Path, context_tokens: int) -> None:
        import llama_cpp  # noqa: PLC0415  (heavy; only the raw side needs it)

        threads = cpu_count()
        self._llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=str(model_path),
            n_ctx=context_tokens,
            n_batch=512,
            n_ubatch=512,
            n_threads=threads,
            n_threads_batch=threads,
            # Skulk's engine leaves llama.cpp's flash-attention default (auto, which
            # enables it on CPU); the high-level Llama turns it off unless asked.
            flash_attn=True,
            verbose=False,
        )
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)

    def run(self, prompt: str, max_tokens: int) -> Sample:
        llm = self.llm
        now = time.perf_counter
        started = now()
        tokens = llm.tokenize(
            DEMO_PROMPT.format(prompt=prompt).encode(), add_bos=False, special=True
        )
        # NOTE: no reset(): generate() reuses the longest prefix it still holds, as
        # Skulk's engine and llama-server do. Each repetition's prompt differs from
        # its first words, so both sides prefill it whole.
        first = last = 0.0
        produced = 0
        pieces: list[bytes] = []
        for token in llm.generate(tokens, temp=0.0, repeat_penalty=1.0, reset=True):
            if self._llama_cpp.llama_vocab_is_eog(self._vocab, token):
                break
            pieces.append(llm.detokenize([token]))  # what a streaming caller would emit
            stamp = now()
            if not produced:
                first = stamp
            last = stamp
            produced += 1
            if produced >= max_tokens:
                break
        span = last - first
        return Sample(
            ttft_ms=(first - started) * 1000.0,
            decode_tps=(produced - 1) / span if span > 0 else float("nan"),
            tokens=produced,
            prompt_tokens=len(tokens),
            text=b"".join(pieces).decode("utf-8", errors="replace"),
        )


def skulk_sample(timing: StreamTiming) -> Sample:
    stats = timing.stats or {}
    engine = stats.get("generation_tps")
    return Sample(
        ttft_ms=timing.ttft_s * 1000.0,
        decode_tps=timing.decode_tps,
        tokens=timing.tokens,
        prompt_tokens=timing.prompt_tokens,
        text="".join(timing.text),
        engine_tps=float(engine) if engine is not None else None,
    )


def skulk_one_token(client: httpx.Client, url: str, prompt: str) -> Sample:
    """A one-token chat completion without a stream: its whole answer is its first token."""
    body = chat_body(prompt, 1, stream=False)
    del body["stream_options"]
    started = time.perf_counter()
    answer = client.post(f"{url}/v1/chat/completions", json=body)
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    if answer.status_code != 200:
        raise RuntimeError(f"chat completion: {answer.status_code} {answer.text}")
    reply = answer.json()
    return Sample(
        ttft_ms=elapsed_ms,
        decode_tps=float("nan"),
        tokens=int(reply["usage"]["completion_tokens"]),
        prompt_tokens=int(reply["usage"]["prompt_tokens"]),
        text=reply["choices"][0]["message"]["content"] or "",
    )


def first_token_delta(raw: list[Sample], skulk: list[Sample]) -> dict[str, Any]:
    """Skulk's first token against raw's, streamed or not: the deltas of the medians, of
    the p90s and per pair (each pair ran back to back, so it cancels slow drift), each
    side's runs and spread, and whether both targets hold."""
    raw_ms = [s.ttft_ms for s in raw]
    skulk_ms = [s.ttft_ms for s in skulk]
    delta = median(skulk_ms) - median(raw_ms)
    p90_delta = spread(skulk_ms)["p90"] - spread(raw_ms)["p90"]
    return {
        "raw_ttft_ms": round(median(raw_ms), 2),
        "skulk_ttft_ms": round(median(skulk_ms), 2),
        "raw_ttft_ms_all": [round(v, 2) for v in raw_ms],
        "skulk_ttft_ms_all": [round(v, 2) for v in skulk_ms],
        "raw_ttft_ms_spread": spread(raw_ms),
        "skulk_ttft_ms_spread": spread(skulk_ms),
        "ttft_delta_ms": round(delta, 2),
        "ttft_delta_p90_ms": round(p90_delta, 2),
        "ttft_delta_paired_ms": round(
            median([k - r for r, k in zip(raw_ms, skulk_ms, strict=True)]), 2
        ),
        "ttft_delta_target_ms": TTFT_DELTA_TARGET_MS,
        "ttft_delta_p90_target_ms": TTFT_DELTA_P90_TARGET_MS,
        "ttft_ok": delta <= TTFT_DELTA_TARGET_MS and p90_delta <= TTFT_DELTA_P90_TARGET_MS,
        "same_text": {s.text for s in raw} == {s.text for s in skulk},
    }


def print_first_token(result: dict[str, Any]) -> None:
    """The non-streaming comparison (one-token answers)."""
    print(
        "one-token answers without a stream, ms: raw "
        f"{spread_text(result['raw_ttft_ms_all'])}, Skulk "
        f"{spread_text(result['skulk_ttft_ms_all'])}"
    )
    print(
        f"Skulk - raw: {result['ttft_delta_ms']:+.2f} ms median, "
        f"{result['ttft_delta_p90_ms']:+.2f} ms p90, "
        f"{result['ttft_delta_paired_ms']:+.2f} ms per pair "
        f"(targets <= {TTFT_DELTA_TARGET_MS:g}, p90 <= {TTFT_DELTA_P90_TARGET_MS:g}): "
        f"{'ok' if result['ttft_ok'] else 'MISS'}; same text: {result['same_text']}"
    )


def summarize(raw: list[Sample], skulk: list[Sample]) -> dict[str, Any]:
    """The streamed comparison: decode rates, and the first token as
    :func:`first_token_delta` gives it."""
    raw_tps = median([s.decode_tps for s in raw])
    skulk_tps = median([s.decode_tps for s in skulk])
    engine = [s.engine_tps for s in skulk if s.engine_tps is not None]
    ratio = skulk_tps / raw_tps
    # Each pair ran back to back, so per-pair figures cancel slow drift (a
    # neighbour's load coming and going) that the ratio of medians still carries.
    paired_ratio = median([k.decode_tps / r.decode_tps for r, k in zip(raw, skulk, strict=True)])
    return {
        **first_token_delta(raw, skulk),
        "raw_decode_tps": round(raw_tps, 2),
        "skulk_decode_tps": round(skulk_tps, 2),
        "skulk_engine_decode_tps": round(median(engine), 2) if engine else None,
        "decode_ratio": round(ratio, 4),
        "decode_ratio_target": DECODE_RATIO_TARGET,
        "decode_ok": ratio >= DECODE_RATIO_TARGET,
        "decode_ratio_paired": round(paired_ratio, 4),
        "raw_tokens": sorted({s.tokens for s in raw}),
        "skulk_tokens": sorted({s.tokens for s in skulk}),
        "raw_prompt_tokens": sorted({s.prompt_tokens for s in raw}),
        "skulk_prompt_tokens": sorted({s.prompt_tokens for s in skulk}),
        "raw_decode_tps_all": [round(s.decode_tps, 2) for s in raw],
        "skulk_decode_tps_all": [round(s.decode_tps, 2) for s in skulk],
        "raw_decode_tps_spread": spread([s.decode_tps for s in raw]),
        "skulk_decode_tps_spread": spread([s.decode_tps for s in skulk]),
    }


def print_table(result: dict[str, Any]) -> None:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISS"

    engine = result["skulk_engine_decode_tps"]
    print(f"{'':24}{'raw llama-cpp-python':>22}{'Skulk HTTP':>14}{'Skulk vs raw':>16}")
    print(
        f"{'decode tok/s (median)':24}{result['raw_decode_tps']:>22.2f}"
        f"{result['skulk_decode_tps']:>14.2f}"
        f"{result['decode_ratio']:>11.3f}x {mark(result['decode_ok']):>4}"
    )
    print(
        f"{'TTFT ms (median)':24}{result['raw_ttft_ms']:>22.2f}{result['skulk_ttft_ms']:>14.2f}"
        f"{result['ttft_delta_ms']:>+10.2f}ms {mark(result['ttft_ok']):>4}"
    )
    print(
        f"spread, decode tok/s: raw {spread_text(result['raw_decode_tps_all'])}, "
        f"Skulk {spread_text(result['skulk_decode_tps_all'])}"
    )
    print(
        f"spread, TTFT ms: raw {spread_text(result['raw_ttft_ms_all'])}, "
        f"Skulk {spread_text(result['skulk_ttft_ms_all'])}"
    )
    print(f"load average before the runs: {result['loads']}")
    print(
        f"median of per-pair figures: decode ratio {result['decode_ratio_paired']:.3f}x, "
        f"TTFT delta {result['ttft_delta_paired_ms']:+.2f} ms; TTFT delta at p90 "
        f"{result['ttft_delta_p90_ms']:+.2f} ms"
    )
    print(
        f"targets: decode ratio >= {DECODE_RATIO_TARGET} and TTFT delta <= "
        f"{TTFT_DELTA_TARGET_MS:g} ms on the medians, TTFT delta <= "
        f"{TTFT_DELTA_P90_TARGET_MS:g} ms at p90; Skulk runner's own decode tok/s: {engine}"
    )
    print(
        f"tokens raw/skulk: {result['raw_tokens']}/{result['skulk_tokens']}, prompt tokens "
        f"{result['raw_prompt_tokens']}/{result['skulk_prompt_tokens']}, "
        f"same text: {result['same_text']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=1024, help="context tokens per sequence")
    parser.add_argument("--reps", type=int, default=7, help="measured pairs")
    parser.add_argument("--warmup", type=int, default=1, help="discarded pairs first")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between runs")
    parser.add_argument(
        "--non-streaming", action="store_true", help="one-token answers without a stream"
    )
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)
    max_tokens = 1 if args.non_streaming else args.max_tokens

    raw_samples: list[Sample] = []
    skulk_samples: list[Sample] = []
    with (
        skulk_serving(args.models_dir, args.context) as daemon,
        httpx.Client(timeout=600.0) as client,
    ):
        raw = RawLlama(demo_model_path(args.models_dir), args.context)
        isolation = Isolation(
            [in_process_side("raw"), daemon_side("skulk", daemon.process)], gap_s=args.gap
        )

        def prompt(rep: int) -> str:
            return f"Story {rep + 1}. {args.prompt}"

        for rep in range(args.warmup + args.reps):
            text = prompt(rep)
            body = chat_body(text, max_tokens)

            def run_raw(text: str = text) -> Sample:
                return raw.run(text, max_tokens)

            def run_skulk(body: dict[str, Any] = body, text: str = text) -> Sample:
                if args.non_streaming:
                    return skulk_one_token(client, daemon.url, text)
                return skulk_sample(stream_chat(client, daemon.url, body))

            # ABBA: alternate which side goes first.
            order: list[tuple[str, Callable[[], Sample]]] = [
                ("raw", run_raw),
                ("skulk", run_skulk),
            ]
            if rep % 2:
                order.reverse()
            pair = {name: isolation.run(name, fn) for name, fn in order}
            if rep >= args.warmup:
                raw_samples.append(pair["raw"])
                skulk_samples.append(pair["skulk"])
            print(
                f"rep {rep + 1}/{args.warmup + args.reps}"
                f"{' (warm-up)' if rep < args.warmup else ''}: raw "
                f"{pair['raw'].decode_tps:.1f} tok/s {pair['raw'].ttft_ms:.1f} ms | skulk "
                f"{pair['skulk'].decode_tps:.1f} tok/s {pair['skulk'].ttft_ms:.1f} ms",
                file=sys.stderr,
            )
    if args.non_streaming:
        result = first_token_delta(raw_samples, skulk_samples)
    else:
        result = summarize(raw_samples, skulk_samples)
    result.update(
        benchmark="single_stream_non_streaming" if args.non_streaming else "single_stream",
        max_tokens=max_tokens,
        context=args.context,
        reps=args.reps,
        threads=cpu_count(),
        machine=machine(),
        load_at_start=round(load_at_start, 2),
        loads=[record.load_1m for record in isolation.records],
        isolation=isolation.report(),
    )
    if args.non_streaming:
        print_first_token(result)
    else:
        print_table(result)
    if args.json:
        print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
