"""The daemon's event loop: asyncio's own by default, uvloop when an operator sets
``SKULK_EVENT_LOOP=uvloop`` (and it is installed)."""

from __future__ import annotations

import asyncio
import importlib

import pytest

from skulk_daemon.system.event_loop import EVENT_LOOP_ENV, loop_factory, loop_name


def test_asyncio_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert loop_factory() is None
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        assert runner.run(_which()) == "asyncio"


def test_uvloop_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "uvloop")
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        assert runner.run(_which()) == "uvloop"


def test_asked_for_but_not_installed_runs_asyncio(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "uvloop")
    real = importlib.import_module

    def no_uvloop(name: str, package: str | None = None) -> object:
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_uvloop)
    assert loop_factory() is None
    assert "uvloop is not installed" in caplog.text


async def _which() -> str:
    return loop_name(asyncio.get_running_loop())
