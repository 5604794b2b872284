"""An MLX ring's rank 0 stops the ring only when its daemon asks it to.

Asked (``Shutdown``: its instance is going), it unloads, and the engine's unload
sends the other ranks STOP. If its stdin ends instead, its daemon is gone but not
the instance: it leaves without a word, so the next rank reports this node lost and
its own node places the model again. (``PR_SET_PDEATHSIG`` usually kills the rank
first, but a runner may read the end of stdin before the kernel's signal lands; a
STOP then left the next rank waiting for a ``Shutdown`` that nobody would send, and
the survivor's instance was never placed again.)

The engine and the gates are stand-ins: what is under test is the runner's choice.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import types
from pathlib import Path

import pytest

from skulk_daemon.runner import mlx_mode, mlx_ring
from skulk_daemon.runner.protocol import (
    Load,
    MlxRingLeg,
    Phase,
    RunnerMessage,
    Shutdown,
    encode_frame,
)

LEG = MlxRingLeg(
    instance_id="ring-instance",
    gate_key=bytes(32),
    rank=0,
    nodes=("node-a", "node-b"),
    endpoints=("127.0.0.1:1", "127.0.0.1:2"),
    start_layer=0,
    end_layer=9,
)


class Exited(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Rank0:
    """A stand-in ring engine: what it was asked to do, and the ring's gates."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.gates = types.SimpleNamespace(finished=threading.Event(), fact="isolated")
        calls = self.calls

        class Engine:
            def __init__(self, *_: object, **__: object) -> None: ...

            def load(self) -> None:
                calls.append("load")

            def warm_up(self) -> None: ...

            def submit(self, _: object) -> None: ...

            def cancel(self, _: object) -> None: ...

            def unload(self) -> None:
                calls.append("unload")  # the real engine's sends the ring STOP

        engine = types.ModuleType("skulk_daemon.engines.mlx_engine")
        engine.MlxEngine = Engine  # type: ignore[attr-defined]
        engine.MlxSettings = lambda *_, **__: None  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "skulk_daemon.engines.mlx_engine", engine)
        monkeypatch.setattr(mlx_ring, "join_ring", lambda *_: self.gates)

        def exit_now(code: int) -> None:
            raise Exited(code)

        monkeypatch.setattr(os, "_exit", exit_now)

    def serve(self, stdin: bytes) -> tuple[int, list[RunnerMessage]]:
        sent: list[RunnerMessage] = []
        load = Load(model_path=str(Path("model")), context_tokens=512, engine="mlx", ring=LEG)
        try:
            code = mlx_mode.serve_mlx(io.BytesIO(stdin), sent.append, load)
        except Exited as exited:
            code = exited.code
        return code, sent


def phases(sent: list[RunnerMessage]) -> list[str]:
    return [m.phase for m in sent if isinstance(m, Phase)]


def test_asked_to_shut_down_rank_0_stops_the_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    rank = Rank0(monkeypatch)
    code, sent = rank.serve(encode_frame(Shutdown()))
    assert code == 0
    assert rank.calls == ["load", "unload"]
    assert rank.gates.finished.is_set()
    assert phases(sent)[-2:] == ["shutting_down", "shutdown"]


def test_with_its_daemon_gone_rank_0_leaves_the_ring_unstopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rank = Rank0(monkeypatch)
    code, sent = rank.serve(b"")  # stdin ended: the parent is gone
    assert code == mlx_mode.EXIT_FAILED
    assert rank.calls == ["load"]  # no unload: no STOP for the other ranks
    assert not rank.gates.finished.is_set()
    assert "shutting_down" not in phases(sent)
