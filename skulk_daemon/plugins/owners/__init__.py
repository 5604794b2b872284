"""Managed plugin owners: the adapter that discovers, observes and serves them
(``adapter.py``), the host callbacks (``host_link.py``, ``host_wire.py``,
``host_callbacks.py``) and the owner runtime program (``owner_host.py``), over the
owner-only socket protocol of :mod:`skulk_host.plugin_owners.wire`."""
