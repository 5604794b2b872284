"""Run real Skulk daemons as subprocesses on free ports, each with its own dirs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml

from tests import log_secrets

STARTUP_TIMEOUT_SECONDS = 120.0
REPO_ROOT = Path(__file__).resolve().parent.parent

HTTP = httpx.Client(cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))
"""The client every helper here sends a test's requests to its daemons with.

``httpx.get`` builds a client per call, and with it a TLS context (the CA bundle read
and parsed): ~40 ms of CPU a request against ~2 ms on a kept client. Polling loops (a
start, a convergence over three nodes) sent several a second, and that CPU came out of
the daemons they waited for on a 2-core machine. A kept connection to a daemon that
died is dropped when reused, not sent on; cookies are never kept (each request stands
alone, as with ``httpx.get``)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


LEAN_RUNNER_THREADS = 1
"""The runner threads of a test node that generates: the suite runs 3-4 workers and
their daemons on two cores, where llama.cpp's compute threads (all cores by default)
wait for each other in a spinning barrier at every op, so one whose partner is
descheduled burns its time slice waiting. Measured under that load: a 16-token chat
took 6-10 CPU-s with two threads, 0.4-1.4 with one. Every test node (a daemon here, an
in-process app in tests/api/in_process.py) runs its runners so unless its test asks
otherwise (``runner_threads=None``, or its own ``skulk.yaml`` setting)."""


def pin_runner_threads(config: Path, threads: int) -> None:
    """Set ``inference.runner_threads: threads`` in the ``skulk.yaml`` at ``config``
    (created if missing) unless the file sets it already. The file is read and written
    as YAML (the daemon's own reader, PyYAML), so any layout a test writes is kept in
    meaning; comments are not kept, and no test's file has any."""
    try:
        text = config.read_text(encoding="utf-8") if config.exists() else ""
        document: Any = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return  # a file the daemon refuses on its own (a test of that)
    if not isinstance(document, dict):
        return  # likewise
    if document.get("inference") is None:
        document["inference"] = {}
    inference = document["inference"]
    if not isinstance(inference, dict) or "runner_threads" in inference:
        return  # set already, or refused by the daemon on its own
    inference["runner_threads"] = threads
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


TEST_ENV = {"SKULK_MDNS": "0", "SKULK_CLUSTER_KEY": "skulk-tests-shared-cluster-key-0001"}


class NodePaths:
    """Where a test's node keeps its things, and the URL it answers on."""

    root: Path
    port: int

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def config_home(self) -> Path:
        return self.root / "config"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class DaemonProcess(NodePaths):
    root: Path
    models_dir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    fabric_port: int = field(default_factory=free_port)
    peers: list[str] = field(default_factory=list)
    extra_args: list[str] = field(default_factory=list)
    launcher: tuple[str, ...] = ("-m", "skulk_daemon")
    """What ``python`` runs: the daemon's module, or a test's wrapper around it."""
    python: str = sys.executable
    """The interpreter (another environment's, for a test that needs one)."""
    bind_host: str = "127.0.0.1"
    """The daemon's ``--host`` (``0.0.0.0`` for one reached on a namespace's address)."""
    runner_threads: int | None = LEAN_RUNNER_THREADS
    """``inference.runner_threads`` for its runners, added to its ``skulk.yaml`` at each
    spawn unless the file sets it (``None``: the product default, all cores). See
    :data:`LEAN_RUNNER_THREADS`."""

    @property
    def fabric_address(self) -> str:
        return f"127.0.0.1:{self.fabric_port}"

    @property
    def log_path(self) -> Path:
        return self.root / "daemon.log"

    def argv(self) -> list[str]:
        return [
            self.python,
            *self.launcher,
            "--host",
            self.bind_host,
            "--api-port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--config-home",
            str(self.config_home),
            "--models-dir",
            str(self.models_dir),
            "--fabric-port",
            str(self.fabric_port),
            *(arg for peer in self.peers for arg in ("--peer", peer)),
            *self.extra_args,
        ]

    def spawn(self) -> subprocess.Popen[str]:
        # Tests run without mDNS (explicit peers only) and share one cluster key.
        env = {**os.environ, **TEST_ENV, **self.extra_env}
        env.pop("SKULK_API_URL", None)
        log_secrets.register_environment(env)
        log_secrets.watch_log(self.log_path)
        # The node's own rotating log file, and the older files rotation keeps.
        node_log = self.data_dir / "logs" / "skulk.log"
        for path in (node_log, *(node_log.with_name(f"skulk.log.{n}") for n in (1, 2, 3))):
            log_secrets.watch_log(path)
        self.root.mkdir(parents=True, exist_ok=True)
        if self.runner_threads is not None:
            pin_runner_threads(self.config_home / "skulk.yaml", self.runner_threads)
        # NOTE: the log goes to a file, not a pipe nobody reads: a chatty daemon would
        # otherwise block once the pipe buffer filled.
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                self.argv(),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=REPO_ROOT,
            )
        return self.process

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def start(self) -> DaemonProcess:
        self.spawn()
        return self.wait_ready()

    def wait_ready(self) -> DaemonProcess:
        """Until the spawned daemon answers ``/node_id`` (killed if it never does)."""
        process = self.process
        assert process is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"daemon exited with {process.returncode}:\n{self.log_text()}")
            try:
                if HTTP.get(f"{self.url}/node_id", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError("daemon did not answer in time")

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 30.0) -> tuple[int, str]:
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        self.process = None
        return code, self.log_text()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def run_to_exit(self, timeout: float = 60.0) -> tuple[int, str]:
        """Start and wait for the process to exit on its own (start-up failures)."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        process = self.spawn()
        code = process.wait(timeout=timeout)
        self.process = None
        return code, self.log_text()[offset:]

    def runner_status(self, instance_id: str) -> str | None:
        """The tag of the instance's first runner status (``"RunnerReady"``), if any."""
        return runner_status(self.get("/state").json(), instance_id)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return HTTP.get(f"{self.url}{path}", **{"timeout": 30.0, **kwargs})

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return HTTP.post(f"{self.url}{path}", **{"timeout": 30.0, **kwargs})


def runner_status(state: dict[str, Any], instance_id: str) -> str | None:
    """The tag of the instance's first runner status in ``state`` (``GET /state``)."""
    instance = state["instances"].get(instance_id)
    if instance is None:
        return None
    body = next(iter(instance.values()))
    runner_id = next(iter(body["shardAssignments"]["runnerToShard"]))
    status = state["runners"].get(runner_id)
    return next(iter(status)) if status else None


class Node(Protocol):
    """What the serving helpers need of a node: a daemon process or an in-process app."""

    @property
    def url(self) -> str: ...

    def get(self, path: str, **kwargs: Any) -> httpx.Response: ...

    def post(self, path: str, **kwargs: Any) -> httpx.Response: ...

    def runner_status(self, instance_id: str) -> str | None: ...


class DaemonFactory(Protocol):
    def __call__(self, name: str = "node", **extra_env: str) -> DaemonProcess: ...
