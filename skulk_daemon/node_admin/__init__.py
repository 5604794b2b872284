"""Node management: restart in place, connectivity probes, the directory picker's
listing and the field-telemetry preview (``api/node_admin.py`` is their HTTP face)."""
