"""The requantization itself: llama.cpp's own quantizer, one type per tensor.

Run as ``python -m skulk_daemon.store.requantize`` by
:class:`~skulk_daemon.store.optimizer.Optimizer`, a process of its own so that the
quantizer's threads, memory and any crash stay out of the daemon, and so that a job
stops with the daemon. The job (:class:`RequantizeJob`) comes as one JSON line on
stdin, which the daemon then keeps open (the process ends when it closes); stdout
carries one JSON :class:`RequantizeProgress` line per tensor written (parsed from
llama.cpp's ``[ i/ n]`` log lines) and a last line saying how it ended.

Each tensor's type is set with llama.cpp's per-tensor overrides
(``llama_model_quantize_params.tt_overrides``: anchored patterns, one per tensor);
``pure`` keeps llama.cpp's own Q4_K_M-style mixing from second-guessing the plan, and
``allow_requantize`` admits a source that is itself quantized (its weights are
dequantized first, so requantizing a Q4_K_M file loses a little against quantizing
the original floats).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import struct
import sys
import threading
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.models.gguf import GgufError, read_gguf_header
from skulk_core.store.optimize import GgmlType, TensorFacts

# llama.cpp's file types (``enum llama_ftype``) whose default type is each ggml type.
FTYPE_FOR: Final[dict[GgmlType, int]] = {
    GgmlType.F16: 1,
    GgmlType.Q4_0: 2,
    GgmlType.Q8_0: 7,
    GgmlType.Q5_0: 8,
    GgmlType.Q2_K: 10,
    GgmlType.Q3_K: 12,
    GgmlType.Q4_K: 15,
    GgmlType.Q5_K: 17,
    GgmlType.Q6_K: 18,
}
_COUNTER: Final = re.compile(rb"\[\s*(\d+)/\s*(\d+)\]")
_WARN_LEVELS: Final = (2, 3)  # GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR
MAX_ERROR_CHARS: Final = 2000
MAX_TENSOR_NAME_BYTES: Final = 65_535
MAX_TENSOR_DIMS: Final = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT: Final = 32
_READ_BUFFER: Final = 1 << 20


class Override(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    ggml_type: GgmlType


class RequantizeJob(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    target: str
    default_type: GgmlType
    overrides: tuple[Override, ...]
    threads: int


class RequantizeProgress(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    done: int = 0
    total: int = 0
    finished: bool = False
    error: str | None = None


def read_tensor_facts(path: Path) -> list[TensorFacts]:
    """Every tensor of the GGUF at ``path``, from its header alone.

    The metadata is skipped by the bounded header reader (a 262,144-token vocabulary
    costs a second, where ``gguf.GGUFReader`` builds an array per token for minutes,
    holding the GIL); each tensor's byte size is the distance to the next one's data.
    Raises :class:`GgufError` (a ValueError) or OSError for a file that is not one."""
    size = path.stat().st_size
    with path.open("rb", buffering=_READ_BUFFER) as stream:
        header = read_gguf_header(stream)
        order = "<" if header.byte_order == "little" else ">"

        def scalar(fmt: str) -> int:
            data = stream.read(struct.calcsize(fmt))
            if len(data) != struct.calcsize(fmt):
                raise GgufError("GGUF tensor infos are truncated")
            value: int = struct.unpack(order + fmt, data)[0]
            return value

        infos: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(header.tensor_count):
            length = scalar("Q")
            if length > MAX_TENSOR_NAME_BYTES:
                raise GgufError(f"a tensor name of {length} bytes exceeds the bound")
            name = stream.read(length).decode("utf-8", "replace")
            dims = scalar("I")
            if dims > MAX_TENSOR_DIMS:
                raise GgufError(f"tensor {name} has {dims} dimensions")
            shape = tuple(scalar("Q") for _ in range(dims))
            infos.append((name, shape, scalar("I"), scalar("Q")))
        alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        align = alignment if isinstance(alignment, int) and alignment > 0 else DEFAULT_ALIGNMENT
        data_start = -(-stream.tell() // align) * align
    ends = sorted({offset for *_, offset in infos} | {size - data_start})
    following = dict(itertools.pairwise(ends))
    return [
        TensorFacts(
            name=name,
            shape=shape,
            ggml_type=kind,
            nbytes=following[offset] - offset if offset in following else 0,
        )
        for name, shape, kind, offset in infos
    ]


def optimizer_problem() -> str | None:
    """Why no optimizer can run on this node (503), or None."""
    try:
        # NOTE: imported here, not at the top: the daemon imports this module for its
        # wire types, and only the quantizer's own process needs llama.cpp loaded.
        import llama_cpp  # noqa: PLC0415
    except ImportError as exc:
        return f"the optimizer needs llama-cpp-python, which is not installed: {exc}"
    params = getattr(llama_cpp, "llama_model_quantize_params", None)
    fields = {name for name, *_ in getattr(params, "_fields_", ())}
    if "tt_overrides" not in fields:
        return "this llama-cpp-python has no per-tensor quantization overrides (tt_overrides)"
    return None


def _emit(progress: RequantizeProgress) -> None:
    sys.stdout.write(msgspec.json.encode(progress).decode() + "\n")
    sys.stdout.flush()


def run(job: RequantizeJob) -> int:
    import llama_cpp  # noqa: PLC0415

    warnings: list[str] = []

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def on_log(level: int, text: bytes, _: ctypes.c_void_p) -> None:
        found = _COUNTER.search(text)
        if found is not None:
            _emit(RequantizeProgress(done=int(found.group(1)), total=int(found.group(2))))
        elif level in _WARN_LEVELS:
            warnings.append(text.decode("utf-8", "replace").strip())

    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
    table = (llama_cpp.llama_model_tensor_override * (len(job.overrides) + 1))()
    # NOTE: the patterns must outlive the call; ``encoded`` holds them (ctypes keeps
    # only the pointer). The array ends with a NULL pattern, as llama.cpp expects.
    encoded = [f"^{re.escape(o.name)}$".encode() for o in job.overrides]
    for index, (override, pattern) in enumerate(zip(job.overrides, encoded, strict=True)):
        table[index].pattern = pattern
        table[index].type = int(override.ggml_type)
    table[len(job.overrides)].pattern = None
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPE_FOR[job.default_type]
    params.nthread = job.threads
    params.allow_requantize = True
    params.pure = True
    params.tt_overrides = ctypes.cast(table, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
    status = llama_cpp.llama_model_quantize(
        job.source.encode(), job.target.encode(), ctypes.byref(params)
    )
    if status != 0:
        why = "; ".join(warnings)[-MAX_ERROR_CHARS:] or f"llama_model_quantize returned {status}"
        _emit(RequantizeProgress(finished=True, error=why))
        return 1
    _emit(RequantizeProgress(finished=True))
    return 0


def _exit_with_parent() -> None:
    """Stop when the daemon goes: it holds our stdin open, so EOF means it is gone
    (killed or stopped), and a half-written result would serve no one."""
    # NOTE: the raw descriptor, not sys.stdin: a daemon thread blocked inside the
    # buffered reader holds its lock, and the interpreter aborts at exit over it.
    while os.read(sys.stdin.fileno(), _READ_BUFFER):
        pass
    os._exit(1)


def main() -> int:
    job = msgspec.json.decode(sys.stdin.buffer.readline(), type=RequantizeJob)
    # NOTE: a daemon thread: it must not keep the process alive once the job is done.
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    # NOTE: llama.cpp's log callback runs on the quantizer's thread while stdout is
    # ours; nothing else writes to stdout in this process.
    os.environ.setdefault("OMP_NUM_THREADS", str(job.threads))
    return run(job)


if __name__ == "__main__":
    raise SystemExit(main())
