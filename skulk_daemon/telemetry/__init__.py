"""This node's telemetry: hardware probes and the republishing loop."""

from skulk_daemon.telemetry.hardware import (
    collect_memory,
    collect_system,
    detect_accelerator,
    detect_backends,
    detect_capability_conflicts,
)
from skulk_daemon.telemetry.publisher import TelemetrySource, run_publisher

__all__ = [
    "TelemetrySource",
    "collect_memory",
    "collect_system",
    "detect_accelerator",
    "detect_backends",
    "detect_capability_conflicts",
    "run_publisher",
]
