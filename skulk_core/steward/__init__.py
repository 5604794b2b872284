"""The intelligent fabric's steward, pure half: where it should be placed, what its
status is, which questions are answered from inventory alone, the tool surface and the
proposals it may create (see the spec's Intelligent Fabric)."""
