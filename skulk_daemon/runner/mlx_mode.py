"""The ``"generate"`` runner when its engine is MLX (``Load.engine == "mlx"``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from skulk_core.chat.generation import ERROR_INVALID_REQUEST, ErrorChunk
from skulk_daemon.engines.base import EngineLoadError
from skulk_daemon.runner.protocol import (
    Failed,
    Load,
    Phase,
    RunnerMessage,
    serve_frames,
)

EXIT_FAILED = 1


def serve_mlx(stdin: BinaryIO, send: Callable[[RunnerMessage], None], load: Load) -> int:
    """Load the MLX model directory, warm it, serve Generate/Cancel until Shutdown."""
    if load.pool is not None:
        send(Failed(message="an MLX model cannot join a llama.cpp RPC pool"))
        return EXIT_FAILED
    gates = None
    if load.ring is not None:
        from skulk_daemon.runner.mlx_ring import join_ring, serve_ring_stage  # noqa: PLC0415

        if load.ring.rank > 0:
            return serve_ring_stage(stdin, send, load)
        # NOTE: before the engine's import starts any thread (see mlx_ring.RingGates).
        gates = join_ring(send, load.ring)
        if gates is None:
            return EXIT_FAILED
    from skulk_daemon.engines.mlx_engine import MlxEngine, MlxSettings  # noqa: PLC0415

    def on_fatal(message: str) -> None:
        send(Failed(message=message))
        os._exit(EXIT_FAILED)

    try:
        settings = MlxSettings(
            Path(load.model_path),
            context_tokens=load.context_tokens,
            slots=load.slots,
            ring_layers=None if load.ring is None else load.ring.end_layer,
        )
        engine = MlxEngine(settings, send, on_fatal=on_fatal)
        engine.load()
        send(Phase(phase="loaded"))
        send(Phase(phase="warming_up"))
        engine.warm_up()
    except (EngineLoadError, ValueError) as exc:
        send(Failed(message=str(exc)))
        return EXIT_FAILED
    detail = "mlx" if gates is None else f"mlx ring rank 0; {gates.fact}"
    send(Phase(phase="ready", detail=detail))

    def refuse(task_id: object, what: str) -> None:
        send(
            ErrorChunk(
                task_id=task_id,  # type: ignore[arg-type]
                code=ERROR_INVALID_REQUEST,
                message=f"this runner {what}",
            )
        )

    asked = serve_frames(
        stdin,
        generate=engine.submit,
        embed=lambda task_id, _: refuse(task_id, "generates text; it does not embed"),
        cancel=engine.cancel,
        speech=lambda task: refuse(task.task_id, "serves no speech"),
    )
    if gates is not None and not asked:
        # The daemon is gone, not the instance: leave without stopping the ring, so
        # the other ranks report this node lost and their nodes place the model
        # again. (PR_SET_PDEATHSIG usually ends the runner first, but it may read
        # the end of stdin before the kernel's signal lands; stopping the ring then
        # left the next rank waiting for a Shutdown nobody would send.)
        os._exit(EXIT_FAILED)
    send(Phase(phase="shutting_down"))
    if gates is not None:
        gates.finished.set()
    engine.unload()
    send(Phase(phase="shutdown"))
    return 0
