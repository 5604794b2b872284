"""``GET /metrics``: this node's counters, histograms and gauges for Prometheus."""

from __future__ import annotations

from litestar import Controller, get
from prometheus_client import CONTENT_TYPE_LATEST

from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.telemetry.metrics import NodeMetrics


class MetricsController(Controller):
    tags = ("Diagnostics",)
    # A scraper on this machine or the LAN (or the operator gateway); with API keys
    # configured, a scraper elsewhere sends one as its bearer token.
    opt = declare(Requirement.TRUSTED_FABRIC)

    @get(
        "/metrics",
        media_type=CONTENT_TYPE_LATEST,
        summary="This node's metrics in Prometheus's text format",
        responses=errors(OPENAI),
    )
    async def metrics(self, metrics: NodeMetrics) -> str:
        return metrics.render().decode()
