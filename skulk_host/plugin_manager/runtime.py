"""The manager's own runtime: verified before it serves, reported in its inventory,
and replaced by ``reload_runtime``.

``serve --sealed-runtime`` (the command setup registers) runs on
``<service root>/runtimes/current/bin/python``, started through the generation's
``bootstrap.py`` (``skulk_host.plugin_service.bootstrap``), which has already walked
the seal before site initialisation and any import of this code: :func:`own_runtime`
then only checks that the records name that generation and that this process's code is
its copy. Started the earlier way (``-I -B -m skulk.extensions.runtime_manager``, a unit
registered before the bootstrap), it re-measures the generation here, after the
imports, and refuses to start on any difference. A manager started without the flag
runs from a live Skulk environment (the tests, a source checkout): it reports no build
and has nothing to reload.

:func:`reload_runtime` verifies another complete generation under the runtimes fence
(the one staging holds), points ``current`` at it, names it in the setup record and
answers; the server then stops the manager, closing every owner it supervises, and the
OS service's keep-alive starts it again on the new generation.

:func:`lifetime_fence` is the manager's own fence (an flock on ``<manager
root>/lifetime.lock``): ``serve`` holds it from before it supervises anything until
every owner it supervised is closed, so a manager the keep-alive starts early waits for
its predecessor, and the host holds it (with the runtimes fence) while it selects a
generation for a manager it stopped (``skulk_daemon.plugins.manager_refresh``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import skulk_host
from skulk_core.plugins.answers import Installation
from skulk_core.plugins.errors import refuse
from skulk_host.files import file_lock
from skulk_host.plugin_manager.protocol import HostListing, ReloadRuntimeRequest, RuntimeReloaded
from skulk_host.plugin_service import bootstrap
from skulk_host.plugin_service.runtime import (
    RUNTIMES_DIR,
    fence,
    generation_dir,
    read_records,
    record_selection,
    select,
    verify,
)

LIFETIME_FENCE: Final = "lifetime.lock"


@contextlib.contextmanager
def lifetime_fence(root: Path, wait: float | None = None) -> Iterator[bool]:
    """Hold the manager root's lifetime fence; yields whether it is held (``wait``
    seconds at most, or until it is free when ``None``)."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with file_lock(root / LIFETIME_FENCE, wait) as held:
        yield held


@dataclass(frozen=True, slots=True)
class ManagerRuntime:
    kind: Literal["staged", "live_environment"]
    service_root: Path | None = None
    generation: str | None = None
    build_sha256: str | None = None
    verified_by: Literal["bootstrap", "manager"] | None = None
    """Who walked the seal: the bootstrap before any import, or this process after."""

    def listing(self, installations: list[Installation]) -> HostListing:
        """``list``'s answer: the installations, this manager's runtime and its
        ``reload_runtime`` support."""
        return HostListing(
            installations=installations,
            reload_runtime=True,
            runtime=self.kind,
            runtime_generation=self.generation,
            build_sha256=self.build_sha256,
        )


LIVE = ManagerRuntime("live_environment")


def own_runtime(sealed: bool) -> ManagerRuntime:
    """This process's runtime; with ``sealed``, verified against its seal first."""
    if not sealed:
        return LIVE
    generation = Path(sys.prefix).resolve()
    if generation.parent.name != RUNTIMES_DIR:
        raise refuse(
            "seal_mismatch",
            "--sealed-runtime needs the interpreter of a staged runtime "
            "(runtimes/current/bin/python under the service root).",
        )
    # NOTE: the bootstrap's walk replaces this process's: the seal is not measured twice.
    by_bootstrap = bootstrap.verified() == generation
    if by_bootstrap:
        completion, _ = read_records(generation)
    else:
        completion = verify(generation)
    code = Path(skulk_host.__file__).resolve()
    if not code.is_relative_to(generation):
        raise refuse(
            "seal_mismatch",
            "The manager's code does not come from its staged runtime: run it with -I.",
        )
    return ManagerRuntime(
        "staged",
        generation.parent.parent,
        completion.generation,
        completion.build_sha256,
        "bootstrap" if by_bootstrap else "manager",
    )


def reload_runtime(runtime: ManagerRuntime, request: ReloadRuntimeRequest) -> RuntimeReloaded:
    """Select the staged generation ``request`` names (its seal verified first)."""
    if runtime.kind != "staged" or runtime.service_root is None:
        raise refuse(
            "malformed",
            "This manager runs from a live Skulk environment, not a staged runtime: there is "
            "no runtime to reload; run skulk-plugin-service setup.",
        )
    root = runtime.service_root
    target = generation_dir(root, request.generation)
    with fence(root, wait=False) as held:
        if not held:
            raise refuse("busy", "A manager runtime is being staged or selected: try again.")
        completion = verify(target, request.manifest_sha256)
        select(root, completion.generation)
        record_selection(root, completion)
    return RuntimeReloaded(generation=completion.generation, selected=True, restarting=True)
