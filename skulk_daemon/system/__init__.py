"""The host: settings, listening sockets, addresses, build facts and file helpers."""
