"""The node: its State, the master, the event log and snapshot, identity and the config store."""
