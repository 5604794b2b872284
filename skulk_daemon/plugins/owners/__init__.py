"""Managed plugin owners as the daemon sees them: the owner-only socket protocol
(``wire.py``) and the adapter that discovers, observes and serves them
(``adapter.py``)."""
