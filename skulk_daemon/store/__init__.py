"""The cluster model store: the store host, its internal transport, staging to nodes."""
