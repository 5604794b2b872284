"""Benchmarks: Skulk measured against a peer in the same run (see bench/README.md)."""
