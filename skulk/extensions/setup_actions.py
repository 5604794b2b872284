"""``skulk.extensions.setup_actions``: durable nonbillable setup actions
(``NodeSetupActionsProvider`` and its bounded types). Re-exports
``skulk_core.extensions.setup_actions``."""

from skulk_core.extensions.setup_actions import (
    MAX_ACTIONS,
    MAX_OPERATIONS,
    NodeSetupActions,
    NodeSetupActionsProvider,
    SetupAction,
    SetupOperation,
    SetupPhase,
    SetupStart,
)

__all__ = [
    "MAX_ACTIONS",
    "MAX_OPERATIONS",
    "NodeSetupActions",
    "NodeSetupActionsProvider",
    "SetupAction",
    "SetupOperation",
    "SetupPhase",
    "SetupStart",
]
