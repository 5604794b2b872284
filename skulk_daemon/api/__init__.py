"""The HTTP API: one Litestar controller per route group, errors mapped in one place."""
