"""The cluster's pure machinery: the fabric wire, the election, telemetry and health,
routing, the worker's plan."""
