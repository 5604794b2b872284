"""The fabric's diagnostics document as the agent builds it (camelCase keys).

The daemon's fabric agent writes it; ``/v1/diagnostics`` (which decodes it into
:class:`~skulk_core.diagnostics.bundle.FabricDiagnostics`) and the metrics read it.
"""

from __future__ import annotations

from typing import TypedDict

from skulk_core.ids import NodeId


class PeerView(TypedDict):
    nodeId: NodeId
    address: str
    skulkVersion: str
    transport: str
    lastIdx: int
    heardSecondsAgo: float


# NOTE: the functional form, because "in" is a keyword.
FramesView = TypedDict(
    "FramesView",
    {
        "in": int,
        "out": int,
        "droppedOut": int,
        "received": dict[str, int],
        "dropped": dict[str, int],
    },
)


class RefusedView(TypedDict):
    address: str
    reason: str
    at: str


class FabricView(TypedDict):
    """The fabric's diagnostics document, as :func:`fabric_view` builds it."""

    nodeId: NodeId
    role: str
    master: NodeId | None
    term: int
    fabricPort: int
    dataTransport: str
    peers: list[PeerView]
    frames: FramesView
    refusedPeers: list[RefusedView]
    dataPlane: dict[str, int]
