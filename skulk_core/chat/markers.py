"""Scanning streamed text for markers that may arrive split across tokens."""

from __future__ import annotations


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``:
    the text a streaming parser must hold back until the next piece arrives."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
