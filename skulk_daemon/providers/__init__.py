"""First-party capability providers."""
