"""The owner side of managed plugins, run as its own process by the manager: the owner
runtime program (``owner_host.py``, its requests a tagged union in
``owner_requests.py``), the owner-only socket protocol (``wire.py``), the owner's end of
a streaming call (``owner_stream.py``) and of the host callbacks (``host_callbacks.py``,
over ``host_wire.py``)."""
