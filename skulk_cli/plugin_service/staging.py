"""Staging the manager's runtime for ``setup``: the code lives in
``skulk_core.plugins.service_staging``, shared with the host, which stages a generation
of its own build after a Skulk update (the CLI may not import the daemon, nor the daemon
the CLI)."""

from skulk_core.plugins.service_staging import (
    _Copier,
    _copy_distributions,
    activate_service_runtime,
    base_interpreter,
    python_identity,
    source_sha256,
    stage_service_runtime,
)

__all__ = [
    "_Copier",
    "_copy_distributions",
    "activate_service_runtime",
    "base_interpreter",
    "python_identity",
    "source_sha256",
    "stage_service_runtime",
]
