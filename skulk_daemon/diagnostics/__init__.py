"""Diagnostics of this node and, by fan-out, of the cluster: facts, doctor, bundles."""
