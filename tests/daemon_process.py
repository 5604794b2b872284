"""Run real Skulk daemons as subprocesses on free ports, each with its own dirs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

STARTUP_TIMEOUT_SECONDS = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class DaemonProcess:
    root: Path
    models_dir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def config_home(self) -> Path:
        return self.root / "config"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "skulk_daemon",
            "--host",
            "127.0.0.1",
            "--api-port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--config-home",
            str(self.config_home),
            "--models-dir",
            str(self.models_dir),
        ]

    def spawn(self) -> subprocess.Popen[str]:
        env = {**os.environ, **self.extra_env}
        env.pop("SKULK_API_URL", None)
        self.process = subprocess.Popen(
            self.argv(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return self.process

    def start(self) -> DaemonProcess:
        process = self.spawn()
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                _, err = process.communicate()
                raise AssertionError(f"daemon exited with {process.returncode}:\n{err}")
            try:
                if httpx.get(f"{self.url}/node_id", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError("daemon did not answer in time")

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 30.0) -> tuple[int, str]:
        assert self.process is not None
        self.process.send_signal(sig)
        _, err = self.process.communicate(timeout=timeout)
        code = self.process.returncode
        self.process = None
        return code, err

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        self.process = None

    def run_to_exit(self, timeout: float = 60.0) -> tuple[int, str]:
        """Start and wait for the process to exit on its own (start-up failures)."""
        process = self.spawn()
        _, err = process.communicate(timeout=timeout)
        self.process = None
        return process.returncode, err

    def runner_status(self, instance_id: str) -> str | None:
        """The tag of the instance's first runner status (``"RunnerReady"``), if any."""
        state = self.get("/state").json()
        instance = state["instances"].get(instance_id)
        if instance is None:
            return None
        body = next(iter(instance.values()))
        runner_id = next(iter(body["shardAssignments"]["runnerToShard"]))
        status = state["runners"].get(runner_id)
        return next(iter(status)) if status else None

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=30.0, **kwargs)  # type: ignore[arg-type]


class DaemonFactory(Protocol):
    def __call__(self, name: str = "node", **extra_env: str) -> DaemonProcess: ...
