"""OptiQ store optimization: the optimized demo against its source, size, bpw, decode.

A daemon is started as the model store over a store path holding the demo GGUF
(Gemma 3 270M Q4_K_M, hard-linked with its manifest and card, as
``store_staging.py`` seeds it). ``POST /store/models/{id}/optimize`` (``--target-bpw``,
default 4.5; candidates 4 and 8) runs through the daemon's real path, polled to the end;
its wall time is reported. Then both files are loaded in this process with
llama-cpp-python and, alternately (ABAB, ``--reps`` pairs after one discarded
warm-up pair), each decodes ``--max-tokens`` greedy tokens from one completion-style
prompt; the medians give decode rates and the ratio optimized / source. The mean
negative log-likelihood a token of a fixed English passage is reported for both as
a quality check (lower is better; the source is itself quantized, so the result is
a requantization, not a quantization of the original floats).

Sizes are the files' bytes; ``file bpw`` is the bits a weight of the whole file
(header included), ``nominal bpw`` the optimizer's own measure (each quantized
tensor's type counted at its nominal width).

Diagnostic, no target. Run from the repository root::

    .venv/bin/python -m bench.store_optimize [--reps 3] [--max-tokens 64] \
        [--target-bpw 4.5] [--json]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/store_optimize.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    LoggedDaemon,
    add_run_options,
    demo_model_path,
    machine,
    median,
    print_json,
    wait_for_quiet,
)
from bench.store_staging import MODEL_ID, _seed_store
from skulk_daemon.store.requantize import read_tensor_facts
from tests.daemon_process import free_port

PROMPT: Final = "The history of the printing press begins"
PASSAGE: Final = (
    "The river rises in the hills to the north and flows south through farmland, "
    "past three market towns, before it reaches the sea. In spring the water runs "
    "high and fast; by late summer it is slow enough that children wade across at "
    "the old ford below the mill."
)
POLL_SECONDS: Final = 1.0
OPTIMIZE_TIMEOUT_SECONDS: Final = 1800.0


def _optimize(daemon: LoggedDaemon, target_bpw: float) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    body = {"target_bpw": target_bpw, "candidate_bits": [4, 8]}
    answer = httpx.post(f"{daemon.url}/store/models/{MODEL_ID}/optimize", json=body, timeout=120)
    answer.raise_for_status()
    while time.monotonic() - started < OPTIMIZE_TIMEOUT_SECONDS:
        status = httpx.get(f"{daemon.url}/store/models/{MODEL_ID}/optimize/status", timeout=120)
        status.raise_for_status()
        body: dict[str, Any] = status.json()
        if body["status"] != "running":
            if body["status"] != "completed":
                raise RuntimeError(f"the optimization failed: {body.get('error')}")
            return body, time.monotonic() - started
        time.sleep(POLL_SECONDS)
    raise RuntimeError("the optimization did not finish in time")


def _weights(path: Path) -> int:
    return sum(math.prod(t.shape) for t in read_tensor_facts(path))


def _decode_rate(llm: Any, max_tokens: int) -> tuple[float, int]:
    llm.reset()
    started = time.perf_counter()
    out = llm.create_completion(PROMPT, max_tokens=max_tokens, temperature=0.0)
    elapsed = time.perf_counter() - started
    tokens = int(out["usage"]["completion_tokens"])
    return tokens / elapsed, tokens


def _nll(llm: Any) -> float:
    """Mean negative log-likelihood a token of PASSAGE (teacher-forced)."""
    import numpy as np  # noqa: PLC0415 - only the quality check needs it

    tokens = llm.tokenize(PASSAGE.encode())
    llm.reset()
    llm.eval(tokens)
    logits = np.asarray(llm.scores[: len(tokens)], dtype=np.float64)
    total = 0.0
    for position in range(len(tokens) - 1):
        row = logits[position]
        top = row.max()
        log_sum = top + math.log(float(np.exp(row - top).sum()))
        total += log_sum - row[tokens[position + 1]]
    return total / (len(tokens) - 1)


def _measure(paths: dict[str, Path], reps: int, max_tokens: int) -> dict[str, Any]:
    import llama_cpp  # noqa: PLC0415 - loaded after the daemon's run

    models = {
        name: llama_cpp.Llama(
            model_path=str(path), n_ctx=512, logits_all=True, verbose=False, seed=0
        )
        for name, path in paths.items()
    }
    rates: dict[str, list[float]] = {name: [] for name in paths}
    counts: dict[str, int] = {}
    for rep in range(reps + 1):
        for name, llm in models.items():
            rate, count = _decode_rate(llm, max_tokens)
            counts[name] = count
            if rep > 0:  # the first pair warms caches and is discarded
                rates[name].append(rate)
    return {
        name: {
            "decode_tok_s": round(median(rates[name]), 2),
            "decode_samples": [round(r, 2) for r in rates[name]],
            "tokens": counts[name],
            "nll_per_token": round(_nll(llm), 4),
        }
        for name, llm in models.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--target-bpw", type=float, default=4.5)
    add_run_options(parser)
    args = parser.parse_args()
    load = wait_for_quiet(args.max_load)
    with tempfile.TemporaryDirectory(prefix="skulk-bench-optimize-") as tmp:
        root = Path(tmp)
        args.models_dir.mkdir(parents=True, exist_ok=True)
        daemon = LoggedDaemon(root=root / "daemon", models_dir=args.models_dir)
        daemon.config_home.mkdir(parents=True, exist_ok=True)
        (daemon.config_home / "skulk.yaml").write_text(
            f"model_store:\n  store_host: true\n  store_path: {root / 'store'}\n"
            f"  store_port: {free_port()}\n"
        )
        try:
            daemon.start()  # installs the demo model on first use
            source = demo_model_path(args.models_dir)
            daemon.kill()
            _seed_store(root / "store", source)
            daemon.start()
            job, seconds = _optimize(daemon, args.target_bpw)
        finally:
            daemon.kill()
        result = Path(job["resultPath"])
        paths = {"source": source, "optiq": result}
        measured = _measure(paths, args.reps, args.max_tokens)
        weights = _weights(source)
        sizes = {name: path.stat().st_size for name, path in paths.items()}
    report: dict[str, Any] = {
        "benchmark": "store_optimize",
        "model": MODEL_ID,
        "target_bpw": job["targetBpw"],
        "candidate_bits": job["candidateBits"],
        "optimize_seconds": round(seconds, 1),
        "nominal_bpw": job["achievedBpw"],
        "weights": weights,
        "load_at_start": round(load, 2),
        "machine": machine(),
    }
    for name, size in sizes.items():
        report[name] = {
            "size_mib": round(size / 2**20, 2),
            "file_bpw": round(size * 8 / weights, 3),
            **measured[name],
        }
    ratio = measured["optiq"]["decode_tok_s"] / measured["source"]["decode_tok_s"]
    report["decode_ratio"] = round(ratio, 3)
    report["size_ratio"] = round(sizes["optiq"] / sizes["source"], 3)
    print(
        f"optimized in {seconds:.1f} s to {job['achievedBpw']} nominal bpw\n"
        f"source: {report['source']['size_mib']} MiB, {report['source']['file_bpw']} file bpw, "
        f"{report['source']['decode_tok_s']} tok/s, NLL {report['source']['nll_per_token']}\n"
        f"optiq:  {report['optiq']['size_mib']} MiB, {report['optiq']['file_bpw']} file bpw, "
        f"{report['optiq']['decode_tok_s']} tok/s, NLL {report['optiq']['nll_per_token']}\n"
        f"size ratio {report['size_ratio']}, decode ratio {report['decode_ratio']}"
    )
    if args.json:
        print_json(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
