"""The cluster fabric: ZeroMQ transport, discovery, election, replication."""
