"""Placement as a service: the master's repair loop."""
