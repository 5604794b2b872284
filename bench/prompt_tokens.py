"""Tokenizing a growing conversation: Skulk's prefix reuse against llama.cpp's tokenize.

Every turn of a conversation is tokenized twice in this process, alternately: by
``llama_tokenize`` on the whole prompt (what llama-server and a plain
llama-cpp-python caller do each turn) and by the runner's ``PromptTokens``
(``engines/_llama_prompt_tokens.py``), which tokenizes only what follows the last
prompt's last clean cut. Both read the demo's vocabulary (Gemma 3, 6,414 special
tokens: llama.cpp searches the whole text once for each). The two must agree token
for token; a difference fails the run.

Two prompt shapes, as the demo is served: ``gemma`` (Gemma's chat template, the
turns between ``<start_of_turn>``/``<end_of_turn>``) and ``plain`` (a base card's
prompt: the turns on new lines, ``chat.prompt.plain_prompt``), ``--turns`` turns
of ~150 words each with a ~20-word reply; ``--reps`` conversations of each, every
one with text no earlier one had. Figures: each turn's median milliseconds over
the conversations, and the last turn's ratio (target: none; issue 43 counts the
time from request to first token, of which this is a part).

Run from the repository root::

    .venv/bin/python -m bench.prompt_tokens [--turns 8] [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):  # `python bench/prompt_tokens.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    add_run_options,
    installed_demo_model,
    machine,
    median,
    print_json,
    wait_for_quiet,
)
from bench._isolation import spread, spread_text
from bench.multi_turn import words
from skulk_daemon.engines._llama_model import plain_tokens, prompt_tokenizer
from tests.engines.demo_model import vocabulary

SHAPES: Final = ("gemma", "plain")
USER_WORDS: Final = 150
REPLY_WORDS: Final = 20
SYSTEM_WORDS: Final = 220


def conversation(shape: str, seed: str, turns: int) -> Iterator[str]:
    """One conversation's prompts, turn by turn, in ``shape``."""
    text = words(f"{seed}/system", SYSTEM_WORDS)
    if shape == "gemma":
        text = f"<start_of_turn>user\n{text}\n\n"
    for turn in range(turns):
        user = words(f"{seed}/user{turn}", USER_WORDS)
        reply = words(f"{seed}/reply{turn}", REPLY_WORDS)
        if shape == "gemma":
            if turn:
                text += "<start_of_turn>user\n"
            text += f"{user}<end_of_turn>\n<start_of_turn>model\n"
            yield text
            text += f"{reply}<end_of_turn>\n"
        else:
            text += f"\n{user}"
            yield text
            text += reply


def timed(tokenize: Callable[[bytes], list[int]], data: bytes) -> tuple[list[int], float]:
    started = time.perf_counter()
    tokens = tokenize(data)
    return tokens, (time.perf_counter() - started) * 1000


def measure(vocab: object, shape: str, turns: int, reps: int) -> dict[str, Any]:
    """One shape's conversations, each turn tokenized both ways; this shape's figures."""
    reusing = prompt_tokenizer(vocab)

    def plain(data: bytes) -> list[int]:
        return plain_tokens(vocab, data)

    per_turn: list[dict[str, list[float]]] = [
        {"plain": [], "reuse": [], "tokens": []} for _ in range(turns)
    ]
    for rep in range(reps + 1):  # the first conversation warms both up
        for turn, prompt in enumerate(conversation(shape, f"{shape}/{rep}", turns)):
            data = prompt.encode()
            first, second = (plain, reusing) if (rep + turn) % 2 else (reusing, plain)
            results = {first: timed(first, data), second: timed(second, data)}
            whole, whole_ms = results[plain]
            reused, reused_ms = results[reusing]
            if reused != whole:
                raise SystemExit(f"{shape} turn {turn + 1}: the tokens differ from llama.cpp's")
            if rep:
                row = per_turn[turn]
                row["plain"].append(whole_ms)
                row["reuse"].append(reused_ms)
                row["tokens"].append(len(whole))
    print(f"\n{shape}: turn  tokens  llama_tokenize ms  reusing ms")
    for turn, row in enumerate(per_turn):
        print(
            f"  {turn + 1:>4}  {median(row['tokens']):>6.0f}  "
            f"{median(row['plain']):>17.2f}  {median(row['reuse']):>10.2f}"
        )
    last = per_turn[-1]
    ratio = median(last["reuse"]) / median(last["plain"])
    print(f"  turn {turns}: llama_tokenize {spread_text(last['plain'])} ms")
    print(f"  turn {turns}: reusing        {spread_text(last['reuse'])} ms ({ratio:.3f}x)")
    return {
        "turns": [
            {
                "turn": turn + 1,
                "tokens": median(row["tokens"]),
                "plain_ms": round(median(row["plain"]), 3),
                "reuse_ms": round(median(row["reuse"]), 3),
            }
            for turn, row in enumerate(per_turn)
        ],
        "last_turn_spread_ms": {"plain": spread(last["plain"]), "reuse": spread(last["reuse"])},
        "last_turn_ratio": round(ratio, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_options(parser)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    load = wait_for_quiet(args.max_load)
    out: dict[str, Any] = {"benchmark": "prompt_tokens", "machine": machine(), "load_1m": load}
    with vocabulary(installed_demo_model(args.models_dir, 2048)) as vocab:
        started = time.perf_counter()
        prompt_tokenizer(vocab)
        out["build_ms"] = round((time.perf_counter() - started) * 1000, 1)
        print(f"load {load:.2f}; the reusing tokenizer built in {out['build_ms']:.0f} ms")
        for shape in SHAPES:
            out[shape] = measure(vocab, shape, args.turns, args.reps)
    if args.json:
        print_json(out)


if __name__ == "__main__":
    main()
