"""What the fabric's helpers need of the cluster agent, and no more.

:class:`~skulk_daemon.fabric.remote_tasks.RemoteTasks` and
:class:`~skulk_daemon.fabric.remote_capabilities.RemoteCapabilities` send through the
agent and read its data plane; they depend on this protocol rather than on
:class:`~skulk_daemon.fabric.cluster.ClusterAgent`, so the agent can own them without an
import cycle (and tests can drive them over a fake link).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from skulk_core.cluster.fabric import (
    CancelTask,
    CapabilityCancel,
    CapabilityData,
    CapabilityDescribe,
    CapabilityDescribed,
    CapabilityOpen,
    CapabilityOutcome,
    RunImages,
    RunSpeech,
    RunTask,
)
from skulk_core.ids import NodeId
from skulk_daemon.fabric.data_plane import DataPlane

CapabilityMessage = (
    CapabilityDescribe
    | CapabilityDescribed
    | CapabilityOpen
    | CapabilityOutcome
    | CapabilityCancel
    | CapabilityData
)


@dataclass(slots=True)
class LinkCounters:
    """Frames dropped and received, by reason and by plane (``diagnostics()``)."""

    dropped: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)


class FabricLink(Protocol):
    """The agent as its helpers see it."""

    @property
    def data(self) -> DataPlane: ...

    @property
    def counters(self) -> LinkCounters: ...

    def send_control(
        self, node_id: NodeId, body: RunTask | RunSpeech | RunImages | CancelTask
    ) -> bool:
        """Send a task message to ``node_id``; False when it cannot be reached."""
        ...

    def send_capability(self, node_id: NodeId, body: CapabilityMessage) -> bool:
        """Send a capability message to ``node_id``; False when it cannot be reached."""
        ...

    def is_live(self, node_id: NodeId) -> bool:
        """Whether ``node_id`` is a member heard from recently."""
        ...
