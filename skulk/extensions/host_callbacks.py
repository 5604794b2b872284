"""``skulk.extensions.host_callbacks``: what a managed owner's provider can ask its Skulk
host through ``context.host`` (opt in with ``host_callbacks_available = True``):
``actions()``, ``revisions()`` and ``invoke(...)``. Re-exports
``skulk_core.extensions.host_callbacks``."""

from skulk_core.extensions.host_callbacks import (
    CALLBACK_DEADLINE_SECONDS,
    MAX_CALLBACK_FRAME_BYTES,
    HostCallbackError,
    HostCallbackErrorCode,
    HostCallbacks,
    StewardPolicy,
)

__all__ = [
    "CALLBACK_DEADLINE_SECONDS",
    "MAX_CALLBACK_FRAME_BYTES",
    "HostCallbackError",
    "HostCallbackErrorCode",
    "HostCallbacks",
    "StewardPolicy",
]
