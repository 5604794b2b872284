"""What an operator is told about how a runner ended."""

from __future__ import annotations

from skulk_daemon.runner.client import exit_message


def _message(
    returncode: int,
    *,
    shutdown_requested: bool = False,
    failure: str | None = None,
    last_log: str | None = None,
) -> str:
    return exit_message(
        42, returncode, shutdown_requested=shutdown_requested, failure=failure, last_log=last_log
    )


def test_a_signal_is_named() -> None:
    assert _message(-9) == "runner (pid 42) was killed by SIGKILL"
    assert _message(-200) == "runner (pid 42) was killed by signal 200"


def test_a_clean_exit_says_whether_it_was_asked_for() -> None:
    assert _message(0, shutdown_requested=True) == "runner (pid 42) shut down"
    assert _message(0, last_log="bye") == "runner (pid 42) exited"


def test_the_reported_failure_wins_over_the_log() -> None:
    assert _message(1, failure="out of memory", last_log="x") == (
        "runner (pid 42) exited with status 1: out of memory"
    )


def test_a_failed_exit_quotes_its_last_log_line() -> None:
    assert _message(3, last_log="Segfault") == (
        "runner (pid 42) exited with status 3; last log line: Segfault"
    )
    assert _message(3) == "runner (pid 42) exited with status 3"
