"""``skulk.extensions.setup``: the read-only setup facets of an installed node
(preflight checks and public setup files). Re-exports
``skulk_core.extensions.node_setup``."""

from skulk_core.extensions.node_setup import (
    MAX_ARTIFACT_CHARS,
    MAX_ARTIFACTS,
    MAX_CHECKS,
    NodePreflight,
    NodePreflightProvider,
    NodeSetup,
    NodeSetupProvider,
    PreflightCheck,
    SetupArtifact,
)

__all__ = [
    "MAX_ARTIFACTS",
    "MAX_ARTIFACT_CHARS",
    "MAX_CHECKS",
    "NodePreflight",
    "NodePreflightProvider",
    "NodeSetup",
    "NodeSetupProvider",
    "PreflightCheck",
    "SetupArtifact",
]
