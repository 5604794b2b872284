"""Managed plugin owners, as the node sees them: the adapter that discovers, observes and
serves them (``adapter.py``) and Skulk's end of the host callbacks (``host_link.py``).
The owner runtime program and both ends' wires are host programs
(:mod:`skulk_host.plugin_owners`)."""
