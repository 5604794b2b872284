"""The Skulk node runtime: API, master, telemetry, model store (and, later, fabric and runners)."""
