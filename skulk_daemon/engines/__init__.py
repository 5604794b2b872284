"""Inference engines: the protocol (``base``) and one module per backend."""
