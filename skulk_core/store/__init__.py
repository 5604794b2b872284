"""The cluster model store: rules decided without I/O (ranges, paths)."""
