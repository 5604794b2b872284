"""The requantization itself: llama.cpp's own quantizer, one type per tensor.

Run as ``python -m skulk_daemon.store.requantize`` by
:class:`~skulk_daemon.store.optimizer.Optimizer`, a process of its own so that the
quantizer's threads, memory and any crash stay out of the daemon, and so that a job
can be stopped with the daemon. The job (:class:`RequantizeJob`) comes as JSON on
stdin; stdout carries one JSON :class:`RequantizeProgress` line per tensor written
(parsed from llama.cpp's ``[ i/ n]`` log lines) and a last line saying how it ended.

Each tensor's type is set with llama.cpp's per-tensor overrides
(``llama_model_quantize_params.tt_overrides``: anchored patterns, one per tensor);
``pure`` keeps llama.cpp's own Q4_K_M-style mixing from second-guessing the plan, and
``allow_requantize`` admits a source that is itself quantized (its weights are
dequantized first, so requantizing a Q4_K_M file loses a little against quantizing
the original floats).
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from pathlib import Path
from typing import Final

import msgspec

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
    """Every tensor of the GGUF at ``path`` (its header only; the data is mapped, not
    read). Raises ValueError (or OSError) for a file that is not a readable GGUF."""
    # NOTE: imported here, not at the top: the daemon imports this module for its
    # wire types, and only the store host's optimizer needs gguf or llama_cpp loaded.
    from gguf import GGUFReader  # noqa: PLC0415

    reader = GGUFReader(path)
    return [
        TensorFacts(
            name=tensor.name,
            shape=tuple(int(d) for d in tensor.shape),
            ggml_type=int(tensor.tensor_type),
            nbytes=int(tensor.n_bytes),
        )
        for tensor in reader.tensors
    ]


def optimizer_problem() -> str | None:
    """Why no optimizer can run on this node (503), or None."""
    try:
        import gguf  # noqa: F401, PLC0415
        import llama_cpp  # noqa: PLC0415
    except ImportError as exc:
        return f"the optimizer needs llama-cpp-python and gguf, which are not installed: {exc}"
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


def main() -> int:
    job = msgspec.json.decode(sys.stdin.buffer.read(), type=RequantizeJob)
    # NOTE: llama.cpp's log callback runs on the quantizer's thread while stdout is
    # ours; nothing else writes to stdout in this process.
    os.environ.setdefault("OMP_NUM_THREADS", str(job.threads))
    return run(job)


if __name__ == "__main__":
    raise SystemExit(main())
