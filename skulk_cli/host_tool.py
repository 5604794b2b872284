"""Run the gateway's host tool, ``python -m skulk_daemon.operator``, as a subprocess.

Host-local authority operations (creating pairing sessions and invitations, listing and
revoking invitations, configuring the relay) have no HTTP route by design: they run on
the gateway host itself, against its authority store. The CLI never imports the
daemon (a layering test enforces it), so it runs the daemon package's tool, exactly as
`skulk serve` execs the daemon. The tool prints one JSON object on stdout; on a
refusal it exits 1 with ``{"error": "<safe message>"}``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from skulk_cli.client import JsonObject

HOST_TOOL_MODULE = "skulk_daemon.operator"
# The tool waits for the authority store's lock, which a busy daemon holds only for one
# transaction at a time; a minute means something is wedged.
HOST_TOOL_TIMEOUT_SECONDS = 60.0


class HostToolRefused(Exception):
    """The host tool refused (or failed); ``message`` is safe to show as is."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def host_tool_argv(python: str, data_dir: Path | None, args: list[str]) -> list[str]:
    """The exact argv the host tool runs with."""
    argv = [python, "-m", HOST_TOOL_MODULE]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    return [*argv, *args]


def run_host_tool(args: list[str], *, data_dir: Path | None = None) -> JsonObject:
    """Run one host tool command and return its JSON answer.

    Raises :class:`HostToolRefused` with the tool's own message on a refusal, or a
    short description when the tool could not run or answered in another shape.
    """
    argv = host_tool_argv(sys.executable, data_dir, args)
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=HOST_TOOL_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        raise HostToolRefused(
            f"the host tool did not answer within {HOST_TOOL_TIMEOUT_SECONDS:.0f} s"
        ) from None
    except OSError as exc:
        raise HostToolRefused(f"could not run the host tool: {exc.strerror or exc}") from None
    answer = _json_object(done.stdout)
    if done.returncode == 0 and answer is not None:
        return answer
    error = answer.get("error") if answer is not None else None
    if isinstance(error, str) and error:
        raise HostToolRefused(error)
    # NOTE: only the last line of stderr: a usage message or an exception's summary.
    # The tool keeps secrets out of its output; the last line is also all that helps.
    last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
    detail = f": {last.strip()}" if last else ""
    raise HostToolRefused(f"the host tool failed (exit {done.returncode}){detail}")


def _json_object(text: str) -> JsonObject | None:
    try:
        parsed: object = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
