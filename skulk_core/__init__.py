"""Skulk's pure domain: ids, wire types, cards, events, State and ``apply``.

Nothing here performs I/O or imports a framework; a test enforces it.
"""
