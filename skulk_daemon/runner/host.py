"""The runner process: one engine, driven over stdin/stdout (``python -m skulk_daemon.runner``).

It never outlives its parent: ``PR_SET_PDEATHSIG`` has the kernel kill it when
the parent dies, and end-of-file on stdin (the parent closed the pipe or died)
makes it exit on its own on platforms without that.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from typing import BinaryIO, Final, Protocol

from skulk_core.chat.generation import ERROR_INVALID_REQUEST, ErrorChunk
from skulk_core.ids import TaskId
from skulk_daemon.engines.base import Engine, EngineLoadError
from skulk_daemon.runner.protocol import (
    ERROR_CANCELLED,
    PARENT_PID_ENV,
    VERBOSE_ENV,
    Embedded,
    Failed,
    Load,
    Phase,
    ProtocolError,
    RunnerMessage,
    RunnerPhase,
    decode_parent_message,
    encode_frame,
    read_frame,
    serve_frames,
)
from skulk_daemon.runner.rpc_roles import DriverGates, donor_lost, serve_donor
from skulk_daemon.system.logs import runner_log_level

log = logging.getLogger("skulk.runner")

_PR_SET_PDEATHSIG: Final = 1
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


class _Outbox:
    """Frames to the parent, from the main thread and the engine's thread."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, message: RunnerMessage) -> None:
        frame = encode_frame(message)
        # NOTE: the lock keeps frames whole when the engine thread's tokens and
        # the main thread's phases are written at the same moment.
        with self._lock:
            try:
                self._stream.write(frame)
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                # The parent is gone (or closed its end); nobody is listening.
                log.warning("the parent stopped reading; exiting")
                os._exit(EXIT_FAILED)

    def phase(self, phase: RunnerPhase, detail: str = "") -> None:
        log.info("phase %s%s", phase, f" {detail}" if detail else "")
        self.send(Phase(phase=phase, detail=detail))


def main() -> int:
    _die_with_parent()
    # NOTE: Ctrl-C in the daemon's terminal reaches the whole process group;
    # the daemon decides when its runners stop (Shutdown, or by dying).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    protocol_out = _claim_stdout()
    logging.basicConfig(
        stream=sys.stderr,
        level=runner_log_level(),
        format="%(asctime)s runner[%(process)d] %(levelname)s %(message)s",
    )
    outbox = _Outbox(protocol_out)
    stdin = sys.stdin.buffer
    try:
        return _serve(stdin, outbox)
    except ProtocolError as exc:
        log.error("%s", exc)
        outbox.send(Failed(message=f"runner protocol error: {exc}"))
        return EXIT_USAGE


class _Loadable(Protocol):
    def load(self) -> None: ...
    def warm_up(self) -> None: ...


def _failed(outbox: _Outbox, exc: Exception) -> int:
    log.error("cannot load: %s", exc)
    outbox.send(Failed(message=str(exc)))
    return EXIT_FAILED


def _bring_up(engine: _Loadable, outbox: _Outbox, ready_detail: str = "") -> bool:
    """Load and warm ``engine``, reporting each phase; False once it has failed."""
    try:
        engine.load()
        outbox.phase("loaded")
        outbox.phase("warming_up")
        engine.warm_up()
    except (EngineLoadError, ValueError) as exc:
        _failed(outbox, exc)
        return False
    outbox.phase("ready", ready_detail)
    return True


def _serve(stdin: BinaryIO, outbox: _Outbox) -> int:
    body = read_frame(stdin)
    if body is None:
        return 0
    first = decode_parent_message(body)
    if not isinstance(first, Load):
        outbox.send(Failed(message=f"the runner expects Load first, got {type(first).__name__}"))
        return EXIT_USAGE
    outbox.phase("loading", first.model_path)
    if first.mode == "embed":
        return _serve_embeddings(stdin, outbox, first)
    if first.mode == "rpc_donor":
        return serve_donor(stdin, outbox.send, first)
    if first.mode in ("speak", "transcribe"):
        from skulk_daemon.runner.speech_mode import serve_speech  # noqa: PLC0415 (see below)

        return serve_speech(stdin, outbox.send, first)
    if first.mode == "render":
        from skulk_daemon.runner.media_mode import serve_media  # noqa: PLC0415 (as above)

        return serve_media(stdin, outbox.send, first)
    if first.mode == "image":
        from skulk_daemon.runner.image_mode import serve_images  # noqa: PLC0415 (see below)

        return serve_images(stdin, outbox.send, first)
    if first.engine == "mlx":
        from skulk_daemon.runner.mlx_mode import serve_mlx  # noqa: PLC0415 (see below)

        return serve_mlx(stdin, outbox.send, first)
    gates: DriverGates | None = None
    if first.pool is not None:
        # NOTE: before llama.cpp is imported (its import starts a thread): the
        # gates move this process into a private namespace, which an unprivileged
        # process may enter only while it has a single thread.
        try:
            gates = DriverGates(first.pool, donor_lost(outbox.send, EXIT_FAILED))
        except (ValueError, OSError) as exc:
            return _failed(outbox, exc)
    try:
        # NOTE: imported only now, so the parent hears "loading" before the
        # native library is mapped, and a broken install is reported as Failed.
        from skulk_daemon.engines.llama_cpp import (  # noqa: PLC0415
            LlamaCppEngine,
            LlamaCppSettings,
            set_llama_logging,
        )
        from skulk_daemon.engines.llama_rpc import RpcOffload  # noqa: PLC0415
    except (ImportError, OSError) as exc:
        outbox.send(Failed(message=f"cannot load the llama.cpp bindings: {exc}"))
        return EXIT_FAILED
    set_llama_logging(verbose=os.environ.get(VERBOSE_ENV) == "1")

    def on_fatal(message: str) -> None:
        outbox.send(Failed(message=message))
        os._exit(EXIT_FAILED)

    try:
        offload: RpcOffload | None = None
        if gates is not None:
            offload = RpcOffload(endpoints=gates.endpoints, layers=gates.layers)
        settings = LlamaCppSettings(
            first.model_path,
            context_tokens=first.context_tokens,
            slots=first.slots,
            n_threads=first.n_threads,
            offload=offload,
            prompt_cache_bytes=first.prompt_cache_bytes,
            reuse_replies=first.reuse_replies,
            settle_after=first.settle_after,
            kv_cache=first.kv_cache,
            flash_attention=first.flash_attention,
        )
        engine: Engine = LlamaCppEngine(settings, outbox.send, on_fatal=on_fatal)
    except ValueError as exc:
        return _failed(outbox, exc)
    if not _bring_up(engine, outbox, "" if gates is None else gates.isolation.fact):
        return EXIT_FAILED
    serve_frames(
        stdin,
        generate=engine.submit,
        embed=lambda task_id, _: outbox.send(
            _wrong_mode(task_id, "generates text; it does not embed")
        ),
        cancel=engine.cancel,
        speech=lambda task: outbox.send(_wrong_mode(task.task_id, "serves no speech")),
        images=lambda task: outbox.send(_wrong_mode(task.task_id, "renders no images")),
    )
    outbox.phase("shutting_down")
    if gates is not None:
        gates.close()
    engine.unload()
    outbox.phase("shutdown")
    return 0


def _wrong_mode(task_id: TaskId, what: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=ERROR_INVALID_REQUEST, message=f"this runner {what}")


def _serve_embeddings(stdin: BinaryIO, outbox: _Outbox, load: Load) -> int:
    """The ``"embed"`` mode: one embedding engine, answering every Embed once."""
    try:
        from skulk_daemon.engines.llama_embed import (  # noqa: PLC0415 (see _serve)
            EmbedCancelled,
            Embeddings,
            EmbedResult,
            EmbedSettings,
            LlamaEmbeddingEngine,
            set_llama_logging,
        )
    except (ImportError, OSError) as exc:
        outbox.send(Failed(message=f"cannot load the llama.cpp bindings: {exc}"))
        return EXIT_FAILED
    set_llama_logging(verbose=os.environ.get(VERBOSE_ENV) == "1")

    def deliver(result: EmbedResult) -> None:
        match result:
            case Embeddings():
                outbox.send(
                    Embedded(
                        task_id=result.task_id,
                        vectors=result.vectors,
                        count=result.count,
                        dimensions=result.dimensions,
                        prompt_tokens=result.prompt_tokens,
                    )
                )
            case EmbedCancelled(task_id=task_id):
                outbox.send(
                    ErrorChunk(
                        task_id=task_id,
                        code=ERROR_CANCELLED,
                        message="the embedding request was cancelled",
                    )
                )
            case ErrorChunk():
                outbox.send(result)

    try:
        settings = EmbedSettings(
            load.model_path, context_tokens=load.context_tokens, n_threads=load.n_threads
        )
        engine = LlamaEmbeddingEngine(settings, deliver)
    except ValueError as exc:
        return _failed(outbox, exc)
    if not _bring_up(engine, outbox):
        return EXIT_FAILED
    serve_frames(
        stdin,
        generate=lambda request: outbox.send(
            _wrong_mode(request.task_id, "serves embeddings, not generation")
        ),
        embed=engine.submit,
        cancel=engine.cancel,
        speech=lambda task: outbox.send(_wrong_mode(task.task_id, "serves no speech")),
        images=lambda task: outbox.send(_wrong_mode(task.task_id, "renders no images")),
    )
    outbox.phase("shutting_down")
    engine.unload()
    outbox.phase("shutdown")
    return 0


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL us when the parent dies (Linux only).

    NOTE: the signal fires when the *thread* that spawned us exits, so the
    parent must spawn runners from a long-lived thread (its event loop's)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    expected = os.environ.get(PARENT_PID_ENV)
    # The parent may have died before prctl took effect; then nobody will kill us.
    if expected and expected.isdigit() and os.getppid() != int(expected):
        os._exit(EXIT_FAILED)


def _claim_stdout() -> BinaryIO:
    """Keep the real stdout for frames and point fd 1 at stderr, so a stray
    ``printf`` in native code can never corrupt the protocol."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "wb")
