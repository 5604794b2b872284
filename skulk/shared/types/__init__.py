"""``skulk.shared.types``: the value types the extension contract names by module."""
