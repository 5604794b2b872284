"""llama.cpp's RPC backend through ctypes: donors serve memory, drivers offload to it.

llama-cpp-python built with ``-DGGML_RPC=ON`` ships ``libggml-rpc``. A donor calls
its server entry point (``ggml_backend_rpc_start_server``), which serves this
process's CPU device to one driver at a time. A driver registers each donor's
endpoint as a device (``ggml_backend_rpc_add_server``) and loads the model with
its last layers offloaded to those devices, in the placement's proportions. The
token embeddings (which Gemma also uses as its output matrix) stay on the driver,
so a donor holds only its layers and no logits cross the network.

Loaded only inside a runner process: never in the daemon or the API.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Final

import llama_cpp
import msgspec

_LIB_DIR: Final = Path(llama_cpp.__file__).parent / "lib"
_PROC_MAPS: Final = Path("/proc/self/maps")
_GGML_BACKEND_DEVICE_TYPE_CPU: Final = 0
_LLAMA_SPLIT_MODE_LAYER: Final = 1
DRIVER_RESIDENT_TENSORS: Final = b"token_embd"
"""Tensors a driver keeps in its own memory, whatever is offloaded (regex)."""


class RpcOffload(msgspec.Struct, frozen=True, kw_only=True):
    """Which donors a driver offloads to: ``endpoints[i]`` holds ``layers[i]`` of
    the model's last layers, in order (the driver keeps the first ones)."""

    endpoints: tuple[str, ...]
    layers: tuple[int, ...]


class _BufferTypeOverride(ctypes.Structure):
    # struct llama_model_tensor_buft_override {
    #     const char * pattern; ggml_backend_buffer_type_t buft; };
    _fields_ = (("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p))


def mapped_library(stem: str, maps: str | None = None) -> Path:
    """The file of ``stem`` (``libggml``, ``libggml-rpc``) that this process mapped
    for libllama (from ``/proc/self/maps``, or ``maps``), else the unversioned file
    beside libllama.

    NOTE: llama-cpp-python's wheel ships ``libggml-rpc.so``, ``.so.0`` and
    ``.so.0.25.3`` as three files, not links. libllama loads the ``.so.0``; opening
    another name maps a second copy of ggml-rpc, whose registry makes its own
    device for the same donor. llama.cpp then finds the layers on one "RPC0" and
    flash attention on the other, concludes the donor cannot run it, and turns it
    off for the whole pooled model (measured: the donor spent 7.1 ms of CPU a token
    at 4 streams against ggml-rpc-server's 5.6, and the pool decoded at 0.89x
    llama-server's). Binding the very file libllama mapped keeps one copy.
    """
    if maps is None:
        try:
            maps = _PROC_MAPS.read_text()
        except OSError:
            maps = ""
    mapped = [
        Path(f[5]) for f in (line.split(maxsplit=5) for line in maps.splitlines()) if len(f) == 6
    ]
    # NOTE: only libllama's own directory (llama_cpp's, or LLAMA_CPP_LIB_PATH):
    # another package may map a ggml of its own.
    home = next((p.parent for p in mapped if _is_library(p, "libllama")), _LIB_DIR)
    for path in mapped:
        if path.parent == home and _is_library(path, stem):
            return path
    return home / f"{stem}.so"


def _is_library(path: Path, stem: str) -> bool:
    return path.name == f"{stem}.so" or path.name.startswith(f"{stem}.so.")


class _Ggml:
    """The ggml entry points the RPC pool needs, bound once per process."""

    def __init__(self) -> None:
        # NOTE: the copies libllama mapped (see mapped_library), RTLD_GLOBAL so
        # ggml-rpc resolves ggml's symbols against them: devices are pointers into them.
        self.ggml = ctypes.CDLL(str(mapped_library("libggml")), mode=ctypes.RTLD_GLOBAL)
        self.rpc = ctypes.CDLL(str(mapped_library("libggml-rpc")), mode=ctypes.RTLD_GLOBAL)
        self.ggml.ggml_backend_dev_by_type.restype = ctypes.c_void_p
        self.ggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
        self.ggml.ggml_backend_dev_buffer_type.restype = ctypes.c_void_p
        self.ggml.ggml_backend_dev_buffer_type.argtypes = [ctypes.c_void_p]
        self.ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
        self.ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
        self.ggml.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
        self.ggml.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.rpc.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
        self.rpc.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
        self.rpc.ggml_backend_rpc_start_server.restype = None
        self.rpc.ggml_backend_rpc_start_server.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_void_p),
        ]

    def cpu_device(self) -> int:
        device = self.ggml.ggml_backend_dev_by_type(_GGML_BACKEND_DEVICE_TYPE_CPU)
        if not device:
            raise OSError("ggml has no CPU device")
        return int(device)


_bound: _Ggml | None = None


def _ggml() -> _Ggml:
    global _bound  # noqa: PLW0603 (one binding per process)
    if _bound is None:
        llama_cpp.llama_backend_init()
        _bound = _Ggml()
    return _bound


def serve_rpc(endpoint: str, n_threads: int) -> None:
    """Serve this process's CPU memory and compute at ``endpoint`` (``host:port``).

    Blocks for the life of the process: llama.cpp's server has no stop call. Run it
    on a daemon thread; the runner exits to stop it.
    """
    ggml = _ggml()
    devices = (ctypes.c_void_p * 1)(ggml.cpu_device())
    ggml.rpc.ggml_backend_rpc_start_server(endpoint.encode(), None, n_threads, 1, devices)


class OffloadParams:
    """The ctypes arrays a driver's ``llama_model_params`` point into; kept alive
    (by the caller) until the model has loaded."""

    def __init__(self, offload: RpcOffload) -> None:
        if len(offload.endpoints) != len(offload.layers) or not offload.endpoints:
            raise ValueError("an RPC offload names one layer count per donor endpoint")
        if any(layers < 1 for layers in offload.layers):
            raise ValueError("every donor holds at least one layer")
        ggml = _ggml()
        devices: list[int] = []
        for endpoint in offload.endpoints:
            registry = ggml.rpc.ggml_backend_rpc_add_server(endpoint.encode())
            count = ggml.ggml.ggml_backend_reg_dev_count(registry) if registry else 0
            if not count:
                raise OSError(f"the RPC donor at {endpoint} offers no device")
            devices.append(int(ggml.ggml.ggml_backend_reg_dev_get(registry, 0)))
        self.devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
        split = (ctypes.c_float * max(llama_cpp.LLAMA_MAX_DEVICES, len(devices)))()
        for index, layers in enumerate(offload.layers):
            split[index] = float(layers)
        self.tensor_split = split
        self.n_gpu_layers = sum(offload.layers)
        cpu_buffers = ggml.ggml.ggml_backend_dev_buffer_type(ggml.cpu_device())
        self.overrides = (_BufferTypeOverride * 2)()
        self.overrides[0].pattern = DRIVER_RESIDENT_TENSORS
        self.overrides[0].buft = cpu_buffers

    def apply(self, params: llama_cpp.llama_model_params) -> None:
        # NOTE: llama-cpp-python types these two fields as arrays but declares them
        # as void pointers in the struct; a cast pointer is what the C side reads.
        params.devices = ctypes.cast(self.devices, ctypes.c_void_p)  # type: ignore[assignment]
        # NOTE: llama.cpp offloads the last ``n_gpu_layers`` of n_layer + 1 (the
        # output layer counts as one), so one more than the donors' layers puts
        # exactly their layers (and the output norm) on them; the output matrix
        # itself stays here through the override.
        params.n_gpu_layers = self.n_gpu_layers + 1
        params.split_mode = _LLAMA_SPLIT_MODE_LAYER
        params.tensor_split = self.tensor_split
        params.tensor_buft_overrides = ctypes.cast(self.overrides, ctypes.c_void_p)  # type: ignore[assignment]


def offload_summary(offload: RpcOffload) -> str:
    """For logs and errors: where the layers go (no secrets in an offload)."""
    return ", ".join(
        f"{layers} layer(s) on {endpoint}"
        for endpoint, layers in zip(offload.endpoints, offload.layers, strict=True)
    )
