"""The owner side of managed plugins: the owner-only socket protocol (``wire.py``) and
the owner's end of a streaming call (``owner_stream.py``)."""
