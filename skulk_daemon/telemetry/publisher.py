"""Assemble this node's telemetry reading and republish it on a fixed interval."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from skulk_core.cluster.prefixes import InstancePrefixes
from skulk_core.cluster.telemetry import (
    Accelerator,
    HealthReason,
    NodeIdentityInfo,
    NodeMemory,
    NodeResources,
    NodeTelemetry,
    Participation,
)
from skulk_core.extensions.capability_nodes import CapabilityNodeSummary
from skulk_core.ids import NodeId
from skulk_core.models.cards import Memory
from skulk_core.models.kv_cache import LLAMA_CPP_SEQUENCES, KvCacheBackend
from skulk_daemon.telemetry.hardware import (
    collect_memory,
    collect_system,
    detect_accelerator,
    detect_backends,
    detect_capability_conflicts,
    resident_bytes,
)

log = logging.getLogger(__name__)

CapabilityGossip = Callable[[], tuple[tuple[str, ...], tuple[CapabilityNodeSummary, ...]]]
"""This node's advertised capability tags and hosted capability nodes, right now."""

# nvidia-smi costs tens to hundreds of milliseconds, too much for every 1.5 s tick;
# free VRAM this stale is still good enough for placement to reason with.
ACCELERATOR_REFRESH_SECONDS = 15.0


class TelemetrySource:
    """Builds fresh :class:`NodeTelemetry` readings for this node.

    The first :meth:`read` probes everything. After that, memory and disk are read
    fresh each time; the NVIDIA probe reruns at most every
    ``ACCELERATOR_REFRESH_SECONDS``; installed backends are fixed for the life of
    the process (installing an engine means a restart), while capability conflicts
    follow each accelerator refresh. Call :meth:`read` from a worker thread
    (``asyncio.to_thread``): it does blocking I/O.
    """

    def __init__(
        self,
        node_id: NodeId,
        identity: NodeIdentityInfo,
        models_dir: Path,
        participation: Participation,
        *,
        api_available: bool = True,
        data_transport: str = "zmq",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        gossip: CapabilityGossip | None = None,
        memory_reserve_bytes: int = 0,
        memory_limit_bytes: int | None = None,
        api_urls: tuple[str, ...] = (),
        runner_pids: Callable[[], Iterable[int]] = tuple,
        kv_cache: Callable[[], KvCacheBackend] = lambda: KvCacheBackend.DEFAULT,
        llama_cpp_slots: Callable[[], int] = lambda: LLAMA_CPP_SEQUENCES,
    ) -> None:
        self.node_id = node_id
        self.identity = identity
        self.models_dir = models_dir
        self.participation = participation
        self.api_available = api_available
        self.data_transport = data_transport
        self._clock = clock
        self.gossip = gossip
        self.prompt_prefixes: Callable[[], tuple[InstancePrefixes, ...]] | None = None
        self.memory_reserve_bytes = memory_reserve_bytes
        self.memory_limit_bytes = memory_limit_bytes
        self.api_urls = api_urls
        # Called from the reading's worker thread: must not touch loop-owned state.
        self.runner_pids = runner_pids
        # Read at each reading: a PUT /config changes what the next placement is sized at.
        self.kv_cache = kv_cache
        self.llama_cpp_slots = llama_cpp_slots
        self._accelerator: Accelerator | None = None
        self._accelerator_reasons: tuple[HealthReason, ...] = ()
        self._accelerator_probed_at: float | None = None
        self._backends: tuple[str, ...] | None = None

    def read(self) -> NodeTelemetry:
        """One complete reading, stamped with the clock's ``now``."""
        memory = self._memory()
        accelerator = self._current_accelerator(memory)
        backends = self._current_backends()
        # Cheap once the llama.cpp build has been judged; follows accelerator refreshes.
        conflicts = detect_capability_conflicts(accelerator, backends)
        system = msgspec.structs.replace(collect_system(self.models_dir), accelerator=accelerator)
        tags, capability_nodes = self.gossip() if self.gossip is not None else ((), ())
        return NodeTelemetry(
            node_id=self.node_id,
            identity=self.identity,
            memory=memory,
            system=system,
            resources=NodeResources(
                backends=backends,
                participation=self.participation,
                api_available=self.api_available,
                data_transport=self.data_transport,
                capability_conflicts=(*self._accelerator_reasons, *conflicts),
                api_urls=self.api_urls,
                kv_cache=self.kv_cache(),
                llama_cpp_slots=self.llama_cpp_slots(),
            ),
            observed_at=self._clock(),
            capabilities=tags,
            capability_nodes=capability_nodes,
            prompt_prefixes=self.prompt_prefixes() if self.prompt_prefixes is not None else (),
        )

    def _memory(self) -> NodeMemory:
        """The machine's RAM, less what the operator reserved for everything else and
        capped at what the operator lets Skulk's models hold."""
        held = resident_bytes(self.runner_pids())
        memory = msgspec.structs.replace(collect_memory(), runners_rss=Memory(in_bytes=held))
        available = memory.ram_available.in_bytes
        if self.memory_reserve_bytes > 0:
            available = max(0, available - self.memory_reserve_bytes)
        if self.memory_limit_bytes is not None:
            available = min(available, max(0, self.memory_limit_bytes - held))
        if available == memory.ram_available.in_bytes:
            return memory
        return msgspec.structs.replace(memory, ram_available=Memory(in_bytes=available))

    def _current_accelerator(self, memory: NodeMemory) -> Accelerator | None:
        now = time.monotonic()
        probed_at = self._accelerator_probed_at
        stale = probed_at is None or (
            # Only an NVIDIA answer (or a failed NVIDIA probe) changes over time.
            self._is_nvidia_probe() and now - probed_at >= ACCELERATOR_REFRESH_SECONDS
        )
        if stale:
            accelerator, reasons = detect_accelerator()
            self._accelerator = accelerator
            self._accelerator_reasons = tuple(reasons)
            self._accelerator_probed_at = now
        accelerator = self._accelerator
        if accelerator is not None and accelerator.vendor == "apple":
            # Unified memory: what the GPU can use is what RAM has free right now.
            return msgspec.structs.replace(
                accelerator, vram_total=memory.ram_total, vram_available=memory.ram_available
            )
        return accelerator

    def _is_nvidia_probe(self) -> bool:
        accelerator = self._accelerator
        return (accelerator is not None and accelerator.vendor == "nvidia") or bool(
            self._accelerator_reasons
        )

    def _current_backends(self) -> tuple[str, ...]:
        if self._backends is None:
            self._backends = detect_backends(self._accelerator)
        return self._backends


async def run_publisher(
    source: TelemetrySource,
    publish: Callable[[NodeTelemetry], None],
    interval: float,
    stop: asyncio.Event,
) -> None:
    """Publish a fresh reading now and then every ``interval`` s until ``stop`` is set.

    A failed reading or publish is logged and the loop carries on: one bad tick
    must not silence a node, since peers would then think it gone. The traceback
    is logged once per run of failures, not every tick.
    """
    failing = False
    while not stop.is_set():
        try:
            reading = await asyncio.to_thread(source.read)
            publish(reading)
        except Exception:
            if not failing:
                log.exception("telemetry reading failed; retrying every %.1f s", interval)
            else:
                log.debug("telemetry reading still failing", exc_info=True)
            failing = True
        else:
            if failing:
                log.info("telemetry reading recovered")
            failing = False
        # NOTE: waiting on the event (not sleeping) makes shutdown immediate.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
