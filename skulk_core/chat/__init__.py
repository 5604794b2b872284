"""Chat semantics shared by every wire format: tools, tool-call and reasoning parsing."""
