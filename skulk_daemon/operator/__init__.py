"""The gateway's operator pairing authority: its encrypted store and the service over it."""
