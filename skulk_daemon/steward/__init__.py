"""The intelligent fabric's steward, effectful half: the master's placement agent, the
steward service (status, turns, proposals) and its read tools."""
