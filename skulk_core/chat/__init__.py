"""Chat semantics shared by every wire format: tools, tool-call and reasoning
parsing, and the inference wire (a generation's request and chunks)."""
