"""A runner's operating-system process: spawning ``python -m skulk_daemon.runner``, the
registry of the runner pids this daemon has not yet reaped (whose memory the node's
telemetry reports), and how a runner ended, told for an operator.
:class:`~skulk_daemon.runner.client.RunnerProcess` speaks the protocol over it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping

import msgspec

from skulk_daemon.runner.protocol import PARENT_PID_ENV

_alive: set[int] = set()
"""The pids of the runners this daemon started and has not yet reaped."""


def runner_started(pid: int) -> None:
    _alive.add(pid)


def runner_reaped(pid: int) -> None:
    _alive.discard(pid)


def spawned_runner_pids() -> tuple[int, ...]:
    """This daemon's runner processes, loading ones included, until each is reaped:
    whose resident memory the node's telemetry reports. Safe from any thread (the
    copy is one step under the GIL)."""
    return tuple(_alive)


async def spawn_runner(env: Mapping[str, str] | None) -> tuple[asyncio.subprocess.Process, int]:
    """Start ``python -m skulk_daemon.runner`` with ``env`` over the daemon's own: the
    process, and the read end of the pipe that is its stdout."""
    # NOTE: ggml prints a backtrace on abort by attaching gdb, which takes
    # seconds; an RPC driver whose donor vanished aborts, and should die fast.
    child_env = {
        "GGML_NO_BACKTRACE": "1",
        **os.environ,
        **(env or {}),
        PARENT_PID_ENV: str(os.getpid()),
    }
    # NOTE: -P keeps the working directory (and a script's) off sys.path, and the
    # runner starts in "/": a module planted where the daemon was started from can
    # never be imported as part of the runner.
    # NOTE: stdout is a pipe of our own, read by StdoutReader rather than the
    # subprocess transport's StreamReader (see there).
    stdout, runner_stdout = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-m",
            "skulk_daemon.runner",
            stdin=asyncio.subprocess.PIPE,
            stdout=runner_stdout,
            stderr=asyncio.subprocess.PIPE,
            env=child_env,
            cwd="/",
        )
    except BaseException:
        os.close(stdout)
        raise
    finally:
        os.close(runner_stdout)
    return process, stdout


class RunnerFailed(RuntimeError):
    """The runner could not start; the message is for an operator, ``code`` is the
    runner's own failure code (see :class:`~skulk_daemon.runner.protocol.Failed`)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class RunnerExit(msgspec.Struct, frozen=True, kw_only=True):
    """How a runner ended. ``expected`` is true only after :meth:`RunnerProcess.shutdown`."""

    pid: int
    returncode: int
    expected: bool
    message: str
    code: str = ""


def exit_message(
    pid: int,
    returncode: int,
    *,
    shutdown_requested: bool,
    failure: str | None,
    last_log: str | None,
) -> str:
    """How a runner ended, for an operator: the signal or status, then the failure it
    reported, or else (when it did not exit cleanly) its last log line."""
    who = f"runner (pid {pid})"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        message = f"{who} was killed by {name}"
    elif returncode == 0:
        message = f"{who} shut down" if shutdown_requested else f"{who} exited"
    else:
        message = f"{who} exited with status {returncode}"
    if failure:
        return f"{message}: {failure}"
    if returncode != 0 and last_log is not None:
        return f"{message}; last log line: {last_log}"
    return message
