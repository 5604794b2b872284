"""The memory a node can give a model: which pool, and how much of it is free.

The pool depends on the engine. llama.cpp on an NVIDIA node loads into VRAM
(unless the node reports that its llama.cpp build cannot use the GPU); Apple
Silicon shares one unified pool; everything else runs from system RAM. Memory
already committed to instances that have not finished loading is taken off the
top, so two quick placements cannot both count the same free bytes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

import msgspec

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.models.memory_estimate import DISCRETE_GPU_MEMORY_FRACTION, UNIFIED_MEMORY_FRACTION
from skulk_core.placement.backends import BACKEND_LLAMA_CPP, BACKEND_MLX

# The capability conflict a node reports when its llama.cpp build has no CUDA: its
# models run from RAM even though it has an NVIDIA GPU.
GPU_SERVING_DISABLED: Final = "gpu_serving_disabled"
VENDOR_NVIDIA: Final = "nvidia"
VENDOR_APPLE: Final = "apple"


class PoolKind(StrEnum):
    RAM = "RAM"
    VRAM = "GPU memory"
    UNIFIED = "unified memory"


class MemoryPool(msgspec.Struct, frozen=True, kw_only=True):
    """One node's pool for one engine. ``free_bytes`` is already capped to the usable share."""

    kind: PoolKind
    free_bytes: int
    committed_bytes: int = 0

    @property
    def available_bytes(self) -> int:
        return max(0, self.free_bytes - self.committed_bytes)


class PoolUnknown(msgspec.Struct, frozen=True, kw_only=True):
    """The node has no usable reading for the pool this engine would use."""

    reason: str


def memory_pool(
    telemetry: NodeTelemetry, backend: str, committed_bytes: int = 0
) -> MemoryPool | PoolUnknown:
    """The pool ``backend`` would load into on this node, less what is committed."""
    accelerator = telemetry.system.accelerator
    ram_free = telemetry.memory.ram_available.in_bytes
    unified = accelerator is not None and accelerator.vendor == VENDOR_APPLE
    if accelerator is not None and unified and backend in (BACKEND_MLX, BACKEND_LLAMA_CPP):
        free = (accelerator.vram_available or telemetry.memory.ram_available).in_bytes
        total = (accelerator.vram_total or telemetry.memory.ram_total).in_bytes
        # macOS caps the GPU working set at a share of unified memory.
        usable = min(free, int(total * UNIFIED_MEMORY_FRACTION))
        return MemoryPool(kind=PoolKind.UNIFIED, free_bytes=usable, committed_bytes=committed_bytes)
    gpu_disabled = any(
        reason.code == GPU_SERVING_DISABLED for reason in telemetry.resources.capability_conflicts
    )
    if (
        accelerator is not None
        and accelerator.vendor == VENDOR_NVIDIA
        and backend == BACKEND_LLAMA_CPP
        and not gpu_disabled
    ):
        if accelerator.vram_available is None:
            # A system-RAM estimate is no stand-in for a GPU budget nobody measured.
            return PoolUnknown(
                reason="it has NVIDIA GPU(s) but reports no free-VRAM reading "
                "(MIG or vGPU?), so a GPU placement cannot be sized"
            )
        usable = accelerator.vram_available.in_bytes
        if accelerator.vram_total is not None:
            # Discrete GPUs keep a margin for the driver and compute buffers.
            usable = min(
                usable, int(accelerator.vram_total.in_bytes * DISCRETE_GPU_MEMORY_FRACTION)
            )
        return MemoryPool(kind=PoolKind.VRAM, free_bytes=usable, committed_bytes=committed_bytes)
    return MemoryPool(kind=PoolKind.RAM, free_bytes=ram_free, committed_bytes=committed_bytes)
