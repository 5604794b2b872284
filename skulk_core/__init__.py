"""Skulk's pure domain: ids, wire types, cards, events, State and ``apply``.

Nothing here performs I/O or imports a framework: no file writes, locks, sockets or
programs run (those live in ``skulk_host``, shared by the CLI and the daemon, or in the
daemon). ``tests/test_layering.py`` enforces it.
"""
