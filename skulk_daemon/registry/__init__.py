"""The signed model registry's client: python-tuf over the configured repository."""
