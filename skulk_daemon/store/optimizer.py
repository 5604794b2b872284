"""OptiQ optimization jobs on the store host: plan, requantize, publish.

:meth:`Optimizer.start` checks the request against what the store holds, plans each
tensor's type (:func:`skulk_core.store.optimize.plan_precision`, pure) and starts one
job; the job runs llama.cpp's quantizer in a subprocess
(:mod:`skulk_daemon.store.requantize`) so the event loop, the daemon's memory and its
runners never wait on it, reading the subprocess's per-tensor progress as it goes.

The result is written under a hidden staging directory of the store root, hashed into
its manifest, given its own card (the source's geometry, its own id, file, size and
quantization, the ``optiq`` capability, no signed-registry identity) and a store
record, and only then renamed into place: a store listing never sees half a model.
It then joins this node's installed models, so it is listed, served to other nodes by
the store and placed like any other stored model.

One job runs at a time per store host (it is CPU-bound and as large as the model);
jobs live in memory: after a restart their status is 404 and their results are
ordinary stored models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.store.optimize import (
    NOMINAL_BITS,
    OPTIQ_TAG,
    TYPE_FOR_BITS,
    OptimizeRequest,
    OptimizeStarted,
    OptimizeState,
    OptimizeStatus,
    PlanRefused,
    PrecisionPlan,
    plan_precision,
    result_model_id,
)
from skulk_core.store.selection import Verification
from skulk_daemon.hub.manifest import ManifestFile, file_digests, write_manifest
from skulk_daemon.models.sidecar import model_dir_name, read_sidecar, sidecar_path, write_sidecar
from skulk_daemon.node.node import Node
from skulk_daemon.store.host import StoreHostService
from skulk_daemon.store.records import RECORD_VERSION, StoreRecord, write_record
from skulk_daemon.store.requantize import (
    Override,
    RequantizeJob,
    RequantizeProgress,
    optimizer_problem,
    read_tensor_facts,
)

log = logging.getLogger(__name__)

STAGING_PREFIX: Final = ".optiq-"
QUANTIZE_SHARE: Final = 0.95
"""Of a job's progress, the share llama.cpp's tensors make; publishing is the rest."""
MAX_PROGRESS_LINE_BYTES: Final = 64 * 1024
SPLIT_MARK: Final = "-00001-of-"
FLOAT_TYPES: Final = frozenset({"F32", "F16", "BF16"})


class OptimizeRefused(Exception):
    """A start or status the store host refuses: the status the API answers with."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class _Job:
    model_id: str
    request: OptimizeRequest
    result_id: str
    plan: PrecisionPlan
    status: OptimizeState = "running"
    progress: float = 0.0
    message: str = "planned; starting llama.cpp's quantizer"
    result_path: str | None = None
    size_bytes: int | None = None
    error: str | None = None
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def view(self) -> OptimizeStatus:
        size = self.size_bytes if self.size_bytes is not None else self.plan.estimated_bytes
        return OptimizeStatus(
            model_id=self.model_id,
            status=self.status,
            progress=round(self.progress, 4),
            message=self.message,
            target_bpw=self.request.target_bpw,
            candidate_bits=self.request.candidate_bits,
            result_model_id=self.result_id,
            result_path=self.result_path,
            achieved_bpw=self.plan.achieved_bpw,
            estimated_size_mb=round(size / (1024 * 1024), 2),
            error=self.error,
        )


class Optimizer:
    """The store host's optimization jobs, by source model id."""

    def __init__(self, node: Node, host: Callable[[], StoreHostService | None]) -> None:
        self._node = node
        self._host = host
        self._jobs: dict[str, _Job] = {}
        # NOTE: a start awaits (reading the tensor infos) between its conflict check and
        # registering its job; the lock keeps two starts from both passing the check.
        self._starting = asyncio.Lock()

    def available(self) -> str | None:
        """Why no optimizer runs here (the API's 503), or None."""
        if self._host() is None:
            return "this node is not the store host"
        return optimizer_problem()

    def status(self, model_id: str) -> OptimizeStatus:
        job = self._jobs.get(model_id)
        if job is None:
            raise OptimizeRefused(404, "not_found", f"no optimization of {model_id} is known")
        return job.view()

    async def start(self, model_id: str, request: OptimizeRequest) -> OptimizeStarted:
        async with self._starting:
            return await self._start(model_id, request)

    async def _start(self, model_id: str, request: OptimizeRequest) -> OptimizeStarted:
        host = self._host()
        problem = self.available()
        if host is None or problem is not None:
            raise OptimizeRefused(503, "optimizer_unavailable", problem or "no store here")
        running = next((j for j in self._jobs.values() if j.status == "running"), None)
        if running is not None:
            raise OptimizeRefused(
                409,
                "optimization_running",
                f"the store is optimizing {running.model_id}; wait for it to finish",
            )
        source_dir, card = self._source(host, model_id)
        result_id = result_model_id(model_id, request.target_bpw)
        made = sidecar_path(host.downloads.model_dir(result_id)).exists()
        if made or self._node.catalog().get(result_id) is not None:
            raise OptimizeRefused(
                409,
                "result_exists",
                f"{result_id} already exists; delete it (DELETE /store/models/{result_id}) "
                "to optimize again",
            )
        assert card.gguf_file is not None
        source = source_dir / card.gguf_file
        try:
            tensors = await asyncio.to_thread(read_tensor_facts, source)
            header = source.stat().st_size - sum(t.nbytes for t in tensors)
            plan = plan_precision(
                tensors, request.target_bpw, request.candidate_bits, max(header, 0)
            )
        except (OSError, ValueError, PlanRefused) as exc:
            raise OptimizeRefused(
                503, "optimizer_unavailable", f"{card.gguf_file} cannot be optimized: {exc}"
            ) from None
        job = _Job(model_id=model_id, request=request, result_id=result_id, plan=plan)
        self._jobs[model_id] = job
        job.task = asyncio.create_task(self._run(job, host, source, card))
        return OptimizeStarted(
            model_id=model_id, target_bpw=request.target_bpw, result_model_id=result_id
        )

    async def stop(self) -> None:
        for job in self._jobs.values():
            if job.process is not None and job.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    job.process.kill()
            if job.task is not None:
                job.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await job.task

    # -- the job ------------------------------------------------------------------------

    def _source(self, host: StoreHostService, model_id: str) -> tuple[Path, ModelCard]:
        manifest = host.manifest(model_id)
        if manifest is None:
            raise OptimizeRefused(404, "not_found", f"{model_id} is not in the store")
        model_dir = host.downloads.model_dir(model_id)
        try:
            card = read_sidecar(sidecar_path(model_dir)).card
        except (OSError, ValueError) as exc:
            raise OptimizeRefused(
                404, "not_found", f"{model_id} has no usable card: {exc}"
            ) from None
        gguf = card.gguf_file
        if gguf is None or not gguf.endswith(".gguf"):
            raise OptimizeRefused(
                503,
                "optimizer_unavailable",
                f"{model_id} is not a GGUF model; this store's optimizer requantizes GGUF "
                "files with llama.cpp",
            )
        if SPLIT_MARK in gguf:
            raise OptimizeRefused(
                503,
                "optimizer_unavailable",
                f"{model_id} is a split GGUF; the optimizer takes single-file GGUF models",
            )
        if gguf not in {item.path for item in manifest.files}:
            raise OptimizeRefused(404, "not_found", f"{model_id}'s manifest lacks {gguf}")
        return model_dir, card

    async def _run(self, job: _Job, host: StoreHostService, source: Path, card: ModelCard) -> None:
        staging = host.root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            name = f"{source.name.removesuffix('.gguf')}-optiq-{job.request.target_bpw:g}bpw.gguf"
            await asyncio.to_thread(staging.mkdir, parents=True)
            await self._quantize(job, source, staging / name)
            job.message = "quantized; hashing and publishing the result"
            job.progress = QUANTIZE_SHARE
            target = host.downloads.model_dir(job.result_id)
            installed = await asyncio.to_thread(_publish, job, card, staging, name, target)
            self._node.installed_models.insert(0, installed)
            job.result_path = str(target / name)
            job.status, job.progress = "completed", 1.0
            job.message = (
                f"stored as {job.result_id}: {job.plan.achieved_bpw} bpw, "
                f"{(job.size_bytes or 0) / (1024 * 1024):.1f} MiB"
            )
            log.info("optimized %s into %s", job.model_id, job.result_id)
        except asyncio.CancelledError:
            job.status, job.error, job.message = "failed", "the node stopped", "stopped"
            raise
        except (OSError, ValueError, RuntimeError) as exc:
            job.status, job.error = "failed", str(exc) or type(exc).__name__
            job.message = "the optimization failed; nothing was stored"
            log.warning("optimizing %s failed: %s", job.model_id, job.error)
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)

    async def _quantize(self, job: _Job, source: Path, target: Path) -> None:
        widths = sorted(job.request.candidate_bits)
        request = RequantizeJob(
            source=str(source),
            target=str(target),
            default_type=TYPE_FOR_BITS[widths[0]][0],
            overrides=tuple(Override(name=c.name, ggml_type=c.ggml_type) for c in job.plan.choices),
            threads=max(1, (os.cpu_count() or 2) // 2),
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "skulk_daemon.store.requantize",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=MAX_PROGRESS_LINE_BYTES,
        )
        job.process = process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(msgspec.json.encode(request) + b"\n")
        await process.stdin.drain()
        # NOTE: stdin stays open while the job runs: the quantizer exits when it closes,
        # so a daemon that is killed does not leave it running.
        error: str | None = None
        finished = False
        job.message = "quantizing"
        async for line in process.stdout:
            try:
                report = msgspec.json.decode(line, type=RequantizeProgress)
            except msgspec.DecodeError:
                continue
            if report.finished:
                finished, error = True, report.error
            elif report.total > 0:
                job.progress = QUANTIZE_SHARE * report.done / report.total
                job.message = f"quantizing tensor {report.done} of {report.total}"
        code = await process.wait()
        process.stdin.close()
        if error is not None or not finished or code != 0:
            raise RuntimeError(error or f"llama.cpp's quantizer exited with status {code}")


def _quantization(job: _Job, source: ModelCard) -> str:
    """The card's quantization: the achieved width, the types used, and where the
    weights came from (a quantized source loses a little against its floats)."""
    types = sorted({c.ggml_type for c in job.plan.choices}, key=lambda t: NOMINAL_BITS[t])
    said = f"OptiQ {job.plan.achieved_bpw} bpw ({'/'.join(t.name for t in types)})"
    before = source.quantization
    if before and before.upper() not in FLOAT_TYPES:
        said += f", requantized from {before} (a little less exact than from the original)"
    return said


def _publish(
    job: _Job, source: ModelCard, staging: Path, name: str, target: Path
) -> InstalledModel:
    """Manifest, card and record beside the new file, then the directory into place."""
    path = staging / name
    size = path.stat().st_size
    sha256, _ = file_digests(path)
    write_manifest(staging, (ManifestFile(path=name, size=size, sha256=sha256),))
    card = msgspec.structs.replace(
        source,
        model_id=ModelId(job.result_id),
        storage_size=Memory(in_bytes=size),
        gguf_file=name,
        source_repository=None,
        source_revision=None,
        base_model=source.model_id,
        quantization=_quantization(job, source),
        display_name=(
            f"{source.display_name or source.model_id} (OptiQ {job.request.target_bpw:g} bpw)"
        ),
        capabilities=tuple(dict.fromkeys((*source.capabilities, OPTIQ_TAG))),
        is_custom=False,
        qualification_only=False,
        registry_card_id=None,
        registry_snapshot_id=None,
        registry_provenance=None,
        artifact_bundle=None,
        companions=(),
    )
    record = StoreRecord(
        version=RECORD_VERSION, model_id=job.result_id, verification=Verification.UNVERIFIED
    )
    write_record(staging, record)
    if target.exists():
        if sidecar_path(target).exists():
            raise OSError(f"{target} appeared while {job.result_id} was being made")
        shutil.rmtree(target)  # an earlier publish that stopped before its card
    # NOTE: one rename publishes the bytes, manifest and record together (the staging
    # directory lives in the store root: same filesystem); the card is written last,
    # atomically, and the store lists only directories with a card, so a listing
    # never sees a half-made model, and the staging directory (no card) is never one.
    os.rename(staging, target)
    installed_at = int(time.time())
    write_sidecar(target, card, installed_at)
    job.size_bytes = size
    assert model_dir_name(ModelId(job.result_id)) == target.name
    return InstalledModel(card=card, location=str(target), installed_at=installed_at)
