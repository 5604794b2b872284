"""Host callbacks: what a managed owner's provider can ask its Skulk host.

A provider served by the owner runtime opts in with a class attribute
``host_callbacks_available = True``; the runtime then advertises it and serves the fixed
``host.sock`` beside ``control.sock``, and the provider's context carries
``context.host`` (a :class:`HostCallbacks`; ``None`` when the provider did not opt in,
and absent from the in-process ``ExtensionContext``, which calls the fabric directly).

Three fixed operations, one outstanding at a time, each answered within
:data:`CALLBACK_DEADLINE_SECONDS` or failed:

- ``actions()``: the live global steward policy (:class:`StewardPolicy`). This Skulk has
  no steward (intelligent-fabric mode is not built), so the policy permits no steward
  actions, said explicitly;
- ``revisions()``: this owner's descriptors the host currently serves, as
  ``{"id@version": revision}``;
- ``invoke(node_id, capability_id, version, revision, arguments)``: a unary call to the
  exact Skulk node id (this host's or a peer's), through ordinary Fabric routing and
  admission; the fabric's typed :class:`CapabilityResult` comes back (a refusal such as
  ``revision_mismatch`` is a result, not an exception).

Failures of the callback channel itself raise :class:`HostCallbackError`. A call lost
with its connection is never replayed.
"""

from __future__ import annotations

from typing import Final, Literal, Protocol

import msgspec

from skulk_core.extensions.capabilities import CapabilityResult, JsonObject

CALLBACK_DEADLINE_SECONDS: Final = 3.0
"""How long the owner waits for the host's answer to one callback."""
MAX_CALLBACK_FRAME_BYTES: Final = 64 * 1024
"""One newline-delimited JSON frame on ``host.sock``, either way."""

HostCallbackErrorCode = Literal[
    "unavailable",
    "lost",
    "timeout",
    "busy",
    "too_large",
    "malformed",
    "unsupported",
    "refused",
]


class HostCallbackError(Exception):
    """A callback the host did not (or could not) answer: ``unavailable`` (no host is
    bound), ``lost`` (the connection ended first; never replayed), ``timeout`` (no
    answer within three seconds), ``busy`` (another callback is outstanding),
    ``too_large`` (a frame over 64 KiB), ``malformed`` / ``unsupported`` / ``refused``
    (the host refused the request)."""

    def __init__(self, code: HostCallbackErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code: HostCallbackErrorCode = code
        self.message = message


class StewardPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The live global steward policy, as the host answers ``actions``."""

    steward_available: bool
    """Whether this Skulk runs a steward (intelligent-fabric mode) at all."""
    permitted_actions: tuple[str, ...]
    """The steward actions an owner may offer or take; empty permits none."""
    reason: str


class HostCallbacks(Protocol):
    """``context.host`` of an owner-hosted provider that opted in."""

    @property
    def connected(self) -> bool:
        """Whether a Skulk host is bound to ``host.sock`` now."""
        ...

    async def actions(self) -> StewardPolicy: ...

    async def revisions(self) -> dict[str, str]: ...

    async def invoke(
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        arguments: JsonObject,
    ) -> CapabilityResult: ...
