"""The manager's own runtime: verified before it serves, reported in its inventory,
and replaced by ``reload_runtime``.

``serve --sealed-runtime`` (the command setup registers) runs on
``<service root>/runtimes/current/bin/python``: :func:`own_runtime` resolves that
generation, re-measures it against its seal and refuses to start when any file,
directory, permission or link differs, or when this process's code is not the
generation's own copy. A manager started without the flag runs from a live Skulk
environment (the tests, a source checkout): it reports no build and has nothing to
reload.

:func:`reload_runtime` verifies another complete generation under the runtimes fence
(the one staging holds), points ``current`` at it, names it in the setup record and
answers; the server then stops the manager, closing every owner it supervises, and the
OS service's keep-alive starts it again on the new generation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import skulk_daemon
from skulk_core.plugins.errors import refuse
from skulk_core.plugins.service_runtime import (
    RUNTIMES_DIR,
    fence,
    generation_dir,
    record_selection,
    select,
    verify,
)
from skulk_daemon.plugins.manager.protocol import ReloadRuntimeRequest


@dataclass(frozen=True, slots=True)
class ManagerRuntime:
    kind: Literal["staged", "live_environment"]
    service_root: Path | None = None
    generation: str | None = None
    build_sha256: str | None = None

    def inventory(self) -> dict[str, Any]:
        """What ``list`` adds: this manager's runtime and its ``reload_runtime`` support."""
        return {
            "reload_runtime": True,
            "runtime": self.kind,
            "runtime_generation": self.generation,
            "build_sha256": self.build_sha256,
        }


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
    completion = verify(generation)
    code = Path(skulk_daemon.__file__).resolve()
    if not code.is_relative_to(generation):
        raise refuse(
            "seal_mismatch",
            "The manager's code does not come from its staged runtime: run it with -I.",
        )
    return ManagerRuntime(
        "staged", generation.parent.parent, completion.generation, completion.build_sha256
    )


def reload_runtime(runtime: ManagerRuntime, request: ReloadRuntimeRequest) -> dict[str, Any]:
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
    return {"generation": completion.generation, "selected": True, "restarting": True}
