"""Image generation through Skulk against stable-diffusion.cpp called directly.

Skulk: ``POST /v1/images/generations`` (b64_json PNG) on a daemon serving the locally
built image model (:mod:`skulk_daemon.models.tiny_sd`, SDXS-512 layout, seeded random
weights) from a runner. Direct: the same engine class the runner uses
(:class:`~skulk_daemon.engines.sd_cpp.StableDiffusionEngine`) loaded in this process,
with the same files, threads, size, steps, guidance and seed. Each side's speed is
images per wall second; the sides alternate in ABBA order, each with the other
quiescent (``bench/_isolation.py``), and the medians are compared.

Target: Skulk / direct >= 0.97.

Run from the repository root::

    .venv/bin/python -m bench.images [--reps 5] [--steps 4] [--json]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/images.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._abba import abba, abba_parser
from bench._common import (
    LoggedDaemon,
    machine,
    median,
    place_ready,
    print_json,
    wait_for_quiet,
)
from bench._isolation import Isolation, daemon_side, in_process_side, spread, spread_text

TARGET: Final = 0.97
PROMPT: Final = "a lighthouse on a cliff at dusk, rain sweeping in from the sea"
SEED: Final = 1234


def main(argv: list[str] | None = None) -> int:
    parser = abba_parser(__doc__)
    parser.add_argument("--steps", type=int, default=4)
    # The test model's native canvas (64x64) keeps a run to minutes on a 2-core machine;
    # --size 512 measures a spec-sized render (minutes per image there).
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args(argv)
    load = wait_for_quiet(args.max_load)
    # NOTE: imported here so `--help` stays fast; this is the engine the runner uses.
    from skulk_daemon.engines.sd_cpp import StableDiffusionEngine  # noqa: PLC0415
    from skulk_daemon.images.admission import DEFAULT_GUIDANCE  # noqa: PLC0415
    from skulk_daemon.models.image_demo import (  # noqa: PLC0415
        TINY_IMAGE_MODEL_ID,
        install_tiny_image_model,
    )

    args.models_dir.mkdir(parents=True, exist_ok=True)
    installed = install_tiny_image_model(args.models_dir)
    model = str(TINY_IMAGE_MODEL_ID)
    same_image: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="skulk-bench-") as root:
        daemon = LoggedDaemon(
            root=Path(root),
            models_dir=args.models_dir,
            extra_env={"SKULK_ENABLE_IMAGE_MODELS": "true"},
        )
        try:
            daemon.start()
            place_ready(daemon, model)
            engine = StableDiffusionEngine(Path(installed.location), None)
            engine.load()
            engine.warm_up()
            body = {
                "model": model,
                "prompt": PROMPT,
                "size": "auto" if args.size == 64 else f"{args.size}x{args.size}",
                "advanced_params": {"seed": SEED, "num_inference_steps": args.steps},
            }
            pictures: dict[str, bytes] = {}
            with httpx.Client(base_url=daemon.url, timeout=600) as client:

                def skulk() -> float:
                    import base64  # noqa: PLC0415

                    started = time.perf_counter()
                    response = client.post("/v1/images/generations", json=body)
                    spent = time.perf_counter() - started
                    response.raise_for_status()
                    pictures["skulk"] = base64.b64decode(response.json()["data"][0]["b64_json"])
                    return 1 / spent

                def direct() -> float:
                    started = time.perf_counter()
                    pictures["direct"] = engine.generate(
                        prompt=PROMPT,
                        width=args.size,
                        height=args.size,
                        seed=SEED,
                        steps=args.steps,
                        guidance=DEFAULT_GUIDANCE,
                    )
                    return 1 / (time.perf_counter() - started)

                isolation = Isolation(
                    [daemon_side("skulk", daemon.process), in_process_side("direct")],
                    gap_s=args.gap,
                )
                speeds = abba(
                    {"": {"skulk": skulk, "direct": direct}},
                    isolation=isolation,
                    warmup=args.warmup,
                    reps=args.reps,
                    after=lambda: same_image.append(pictures["skulk"] == pictures["direct"]),
                )
        finally:
            daemon.kill()
    m = {side: median(values) for side, values in speeds.items()}
    ratio = m["skulk"] / m["direct"]
    result: dict[str, Any] = {
        "benchmark": "images",
        "machine": machine(),
        "load_at_start": round(load, 2),
        "size": args.size,
        "steps": args.steps,
        "skulk_images_per_s": round(m["skulk"], 4),
        "direct_images_per_s": round(m["direct"], 4),
        "ratio": round(ratio, 4),
        "target": TARGET,
        "ok": ratio >= TARGET,
        "same_image": all(same_image),
        "all": {side: [round(v, 4) for v in values] for side, values in speeds.items()},
        "spread": {side: spread(values) for side, values in speeds.items()},
        "isolation": isolation.report(),
    }
    print(
        f"{args.size}x{args.size}, {args.steps} steps. Images per second: Skulk "
        f"{m['skulk']:.4f}, direct {m['direct']:.4f}, ratio {ratio:.3f}x (target >= {TARGET}); "
        f"same PNG on both sides: {all(same_image)}"
    )
    for side, values in speeds.items():
        print(f"  {side}: {spread_text(values)} images per s (median, p90, min-max)")
    if args.json:
        print_json(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
