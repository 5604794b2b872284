"""``skulk.shared``: shared public types (see ``skulk.shared.types``)."""
