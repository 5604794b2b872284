"""What the diagnostics read of the fabric agent and the capability service.

Diagnostics sit below both (the fabric and the capability service never need them),
so they name the few readings they take as Protocols here, and the composition root
(:mod:`skulk_daemon.services`) hands the real ``ClusterAgent`` and
``CapabilityService`` in.
"""

from __future__ import annotations

from typing import Protocol

from skulk_core.diagnostics.fabric_document import FabricView


class PortSource(Protocol):
    """The fabric transport: the port it is bound to."""

    @property
    def port(self) -> int: ...


class ReportSource(Protocol):
    """The fabric's telemetry aggregates."""

    def report(self) -> dict[str, object]: ...


class FabricSource(Protocol):
    """The fabric agent, as the node bundle, its ports and the telemetry view read it."""

    @property
    def transport(self) -> PortSource: ...

    @property
    def telemetry_stats(self) -> ReportSource: ...

    def diagnostics(self) -> FabricView: ...


class ProviderSource(Protocol):
    """The capability service: its counters for the node bundle (no call contents)."""

    def diagnostics(self) -> dict[str, object]: ...
