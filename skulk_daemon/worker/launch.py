"""What a runner loads: the model file, its window, and its part in an RPC pool.

The supervisor asks :class:`Launcher` for a runner's :class:`Load` before it spawns
the process. Everything that can make a node refuse its share is decided here, each
as a :class:`LaunchRefused` with the code the cluster acts on: no model file
(``model_not_installed:<node>``), bytes that could not be brought here
(``download_failed:<node>``), not enough live memory
(``placement_refused:<node>``, with the arithmetic), an RPC pool this node cannot
join, or donors that never came up (``rpc_donor_lost:<node>``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from skulk_core.config import FlashAttention
from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelTask, is_directory_card
from skulk_core.models.context_window import DEFAULT_CONTEXT_TOKENS
from skulk_core.models.kv_cache import KvCacheBackend
from skulk_core.placement.backends import (
    BACKEND_LLAMA_CPP,
    BACKEND_MLX,
    is_mlx_card,
    runner_reservation,
)
from skulk_core.placement.local_fit import local_shortfall
from skulk_core.placement.repair import DOWNLOAD_FAILED, MODEL_NOT_INSTALLED, PLACEMENT_REFUSED
from skulk_core.placement.rpc_pool import RPC_DONOR_LOST
from skulk_core.state.shards import Instance, LlamaRpcInstance, RpcDonorShardMetadata, ShardMetadata
from skulk_daemon.node.config_store import kv_cache_for
from skulk_daemon.node.node import Node
from skulk_daemon.runner.protocol import Load, RunnerEngine, RunnerMode
from skulk_daemon.store.cache import mark_used
from skulk_daemon.store.staging import Staging, StagingFailed
from skulk_daemon.worker.fetch import Fetched, FetchFailed, ModelFetch
from skulk_daemon.worker.mlx_ring_loads import ring_leg
from skulk_daemon.worker.rpc_loads import (
    DONOR_READY_TIMEOUT_SECONDS,
    donor_load,
    donors_status,
    driver_pool,
)

DONOR_POLL_SECONDS: Final = 0.25


class LaunchRefused(Exception):
    """This node will not start the runner; ``code`` goes to ``instanceFailures``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Launcher:
    def __init__(self, node: Node) -> None:
        self._node = node
        self.rpc_gate_key: bytes | None = None
        self.staging = Staging(node)
        self.fetch = ModelFetch(node, self.staging)

    def model_path(self, model_id: ModelId) -> Path | None:
        entry = self._node.catalog().get(model_id)
        if entry is not None and entry.location is not None and is_directory_card(entry.card):
            # A speech, image or media runner loads its model directory (its engine knows
            # the files).
            directory = Path(entry.location)
            return directory if directory.is_dir() else None
        if entry is not None and entry.location is not None and is_mlx_card(entry.card):
            # An MLX runner loads the model directory (config, safetensors, tokenizer).
            directory = Path(entry.location)
            return directory if (directory / "config.json").is_file() else None
        if entry is None or entry.location is None or entry.card.gguf_file is None:
            return None
        path = Path(entry.location) / entry.card.gguf_file
        return path if path.is_file() else None

    def runner_mode(self, model_id: ModelId) -> RunnerMode:
        """``"embed"`` for a card that embeds and does not generate text; ``"speak"``
        or ``"transcribe"`` for a speech card and ``"render"`` for a video or music card
        that does not generate text."""
        entry = self._node.catalog().get(model_id)
        tasks = () if entry is None else entry.card.tasks
        if ModelTask.TEXT_EMBEDDING in tasks and ModelTask.TEXT_GENERATION not in tasks:
            return "embed"
        if ModelTask.TEXT_GENERATION not in tasks:
            if ModelTask.TEXT_TO_SPEECH in tasks:
                return "speak"
            if ModelTask.SPEECH_TO_TEXT in tasks:
                return "transcribe"
            if ModelTask.TEXT_TO_VIDEO in tasks or ModelTask.TEXT_TO_MUSIC in tasks:
                return "render"
            if ModelTask.TEXT_TO_IMAGE in tasks or ModelTask.IMAGE_TO_IMAGE in tasks:
                return "image"
        return "generate"

    def runner_engine(self, model_id: ModelId) -> RunnerEngine:
        """MLX for a card in MLX's layout, llama.cpp otherwise."""
        entry = self._node.catalog().get(model_id)
        return "mlx" if entry is not None and is_mlx_card(entry.card) else "llama_cpp"

    async def load_for(
        self, instance: Instance, shard: ShardMetadata, stopping: Callable[[], bool]
    ) -> Load | None:
        """The runner's Load; None if it was stopped meanwhile. Raises LaunchRefused."""
        model_id = instance.shard_assignments.model_id
        node_id = self._node.node_id
        if isinstance(instance, LlamaRpcInstance) and self.rpc_gate_key is None:
            raise LaunchRefused("rpc_unavailable", "RPC pooling needs the cluster fabric")
        key = self.rpc_gate_key or b""
        if isinstance(shard, RpcDonorShardMetadata):
            assert isinstance(instance, LlamaRpcInstance)
            made = donor_load(instance, shard, node_id, key, None)
            if isinstance(made, str):
                raise LaunchRefused("rpc_pool_invalid", made)
            return made
        engine = self.runner_engine(model_id)
        ring = None
        if len(instance.shard_assignments.node_to_runner) > 1 and not isinstance(
            instance, LlamaRpcInstance
        ):
            leg = ring_leg(instance, shard, node_id, engine, key)
            if isinstance(leg, str):
                raise LaunchRefused(f"{PLACEMENT_REFUSED}:{node_id}", leg)
            ring = leg
        path = self.model_path(model_id)
        if path is None:
            fetched = await self._fetch(model_id, stopping)
            if fetched is Fetched.STOPPED:
                return None
            path = self.model_path(model_id)
        if path is None:
            raise LaunchRefused(
                f"{MODEL_NOT_INSTALLED}:{node_id}",
                f"model {model_id} has no GGUF file on node {node_id}",
            )
        # A staged copy's last use orders staging eviction (least recently used first).
        used = self._node.catalog().get(model_id)
        if used is not None and used.location is not None:
            await asyncio.to_thread(mark_used, Path(used.location), time.time())
        context_tokens = instance.context_token_limit or DEFAULT_CONTEXT_TOKENS
        inference = self._node.config.inference
        cells = kv_cache_for(self._node.config)
        shortfall = self._shortfall(model_id, shard, context_tokens, cells)
        if shortfall is not None:
            raise LaunchRefused(f"{PLACEMENT_REFUSED}:{node_id}", f"refused its share: {shortfall}")
        pool = None
        if isinstance(instance, LlamaRpcInstance):
            if not await self._await_donors(instance, stopping):
                return None
            pool = driver_pool(instance, key)
        return Load(
            model_path=str(path),
            context_tokens=context_tokens,
            slots=inference.parallel_requests,
            n_threads=inference.runner_threads,
            mode=self.runner_mode(model_id),
            pool=pool,
            prompt_cache_bytes=inference.prompt_cache_mb * 1024**2,
            reuse_replies=inference.reuse_replies,
            # NOTE: with replies reused nothing is ever settled; saying so keeps the
            # runner's report honest (no idle work after a reply).
            settle_after=None
            if inference.reuse_replies
            else _seconds_or_off(inference.settle_idle_ms),
            kv_cache=_kv_cache(cells),
            flash_attention=_flash_attention(inference.flash_attention),
            engine=engine,
            ring=ring,
        )

    async def _fetch(self, model_id: ModelId, stopping: Callable[[], bool]) -> Fetched:
        """Bring the model's bytes here (the store's copy, else its pinned source) while
        the runner is ``RunnerLoading``; see :mod:`skulk_daemon.worker.fetch`."""
        entry = self._node.catalog().get(model_id)
        if entry is None or entry.card.gguf_file is None:  # what llama.cpp loads
            return Fetched.ABSENT
        node_id = self._node.node_id
        try:
            return await self.fetch.fetch(entry.card, stopping)
        except StagingFailed as exc:
            raise LaunchRefused(f"{MODEL_NOT_INSTALLED}:{node_id}", str(exc)) from None
        except FetchFailed as exc:
            raise LaunchRefused(f"{DOWNLOAD_FAILED}:{node_id}", str(exc)) from None
        except (OSError, ValueError, RuntimeError) as exc:
            # NOTE: anything else a transfer raises still fails the launch visibly; left
            # to propagate, it would leave the runner reported as loading for ever.
            message = f"bringing {model_id} here failed: {type(exc).__name__}: {exc}"
            raise LaunchRefused(f"{DOWNLOAD_FAILED}:{node_id}", message) from None

    def _shortfall(
        self, model_id: ModelId, shard: ShardMetadata, context_tokens: int, cells: KvCacheBackend
    ) -> str | None:
        """Why this node can no longer hold ``shard`` (its live memory, its runner's KV
        cells of type ``cells``), or None."""
        entry = self._node.catalog().get(model_id)
        reading = self._node.own_telemetry()
        if entry is None or reading is None:
            return None
        # What this node's runner will reserve: its own cell type and slots.
        engine = BACKEND_LLAMA_CPP if self.runner_engine(model_id) == "llama_cpp" else BACKEND_MLX
        kv = runner_reservation(
            entry.card, engine, cells=cells, slots=self._node.config.inference.parallel_requests
        )
        return local_shortfall(
            entry.card,
            shard,
            node_id=self._node.node_id,
            context_tokens=context_tokens,
            reading=reading,
            backend=BACKEND_LLAMA_CPP,
            kv=kv,
        )

    async def _await_donors(self, instance: LlamaRpcInstance, stopping: Callable[[], bool]) -> bool:
        """Wait until every donor of the pool serves: llama.cpp copies their layers to
        them while the driver loads. False if stopped meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DONOR_READY_TIMEOUT_SECONDS
        model_id = instance.shard_assignments.model_id
        while not stopping():
            status = donors_status(self._node.state, instance)
            if status is True:
                return True
            if status is not False:
                raise LaunchRefused(
                    f"{RPC_DONOR_LOST}:{status}",
                    f"RPC donor {status} did not start serving its share of {model_id}",
                )
            if loop.time() > deadline:
                raise LaunchRefused(
                    "rpc_donor_timeout",
                    f"the RPC donors of {model_id} did not start serving within "
                    f"{DONOR_READY_TIMEOUT_SECONDS:g} s",
                )
            await asyncio.sleep(DONOR_POLL_SECONDS)
        return False


def _seconds_or_off(milliseconds: int) -> float | None:
    return milliseconds / 1000 if milliseconds > 0 else None


def _kv_cache(backend: KvCacheBackend) -> str | None:
    match backend:
        case KvCacheBackend.DEFAULT:
            return None
        case KvCacheBackend.F16 | KvCacheBackend.Q8_0 | KvCacheBackend.Q4_0:
            return backend.value


def _flash_attention(setting: FlashAttention) -> bool | None:
    match setting:
        case FlashAttention.AUTO:
            return None
        case FlashAttention.ON:
            return True
        case FlashAttention.OFF:
            return False
