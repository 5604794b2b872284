"""One rank of a bare two-rank MLX ring over loopback, for test_mlx_ring_stages.py.

``python -m tests.engines.mlx_ring_stage_worker MODEL_DIR...`` with ``MLX_HOSTFILE``
and ``MLX_RANK`` set. For each model directory in turn, rank 0 holds the first half
of its layers (plus the embeddings and head) and rank 1 the second, through
``_mlx_stage``'s real ``Stage``/``RingModel``/``serve_stage``; rank 0 decodes
greedily over the ring, then with the whole model loaded by mlx-lm alone, and
prints both token lists as one JSON line per model; then the same for a
follow-up prompt, over the ring's caches trimmed back to the shared prefix where
every rank's caches can be trimmed (fresh ones where not).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import load_model

from skulk_daemon.engines._mlx_stage import RingModel, Stage, serve_stage

PROMPT = [1, 5, 9, 14, 3, 22, 7, 30, 11, 2]
"""Longer than the Llama model's sliding window, so the windowed mask matters."""
SHARED = 6
FOLLOW_UP = [*PROMPT[:SHARED], 40, 41, 42]
"""A second prompt sharing the first's first :data:`SHARED` tokens (prefix reuse)."""
TOKENS = 8


def greedy(model: object, cache: object, prompt: list[int]) -> list[int]:
    steps = generate_step(
        mx.array(prompt),
        model,  # type: ignore[arg-type]
        max_tokens=TOKENS,
        sampler=make_sampler(0.0),
        prompt_cache=cache,
    )
    return [int(token) for token, _ in steps]


def main() -> int:
    group = mx.distributed.init(strict=True, backend="ring")
    rank = int(group.rank())
    for name in sys.argv[1:]:
        directory = Path(name)
        layers = int(json.loads((directory / "config.json").read_text())["num_hidden_layers"])
        split = layers // 2
        if rank == 0:
            ring = RingModel(Stage(directory, 0, split, first=True), group)
            cache = ring.make_cache()
            over_ring = greedy(ring, cache, PROMPT)
            trimmed = ring.can_trim(int(cache[0].offset))  # type: ignore[attr-defined]
            if trimmed:
                again = greedy(ring, ring.trim_cache(cache, SHARED), FOLLOW_UP[SHARED:])
            else:
                again = greedy(ring, ring.make_cache(), FOLLOW_UP)
            ring.stop()
            whole = load_model(directory)[0]
            answer = {
                "model": directory.name,
                "ring": over_ring,
                "whole": greedy(whole, None, PROMPT),
                "trimmed": trimmed,
                "ring_again": again,
                "whole_again": greedy(whole, None, FOLLOW_UP),
            }
            print(json.dumps(answer))
            sys.stdout.flush()
        else:
            serve_stage(Stage(directory, split, layers, first=False), group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
