"""The daemon's event loop: uvloop when installed, asyncio's own when not or when
``SKULK_EVENT_LOOP=asyncio`` rules it out."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from skulk_daemon.system.event_loop import EVENT_LOOP_ENV, loop_factory, loop_name


def test_asyncio_forced_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert loop_factory() is None


def test_without_uvloop_the_standard_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    real = importlib.import_module

    def no_uvloop(name: str, package: str | None = None) -> object:
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_uvloop)
    assert loop_factory() is None
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        assert runner.run(_which()) == "asyncio"


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed")
def test_uvloop_preferred_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        assert runner.run(_which()) == "uvloop"


async def _which() -> str:
    return loop_name(asyncio.get_running_loop())
