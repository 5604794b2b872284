"""The reference Skulk capability provider (``echo@1.0.0`` and streaming siblings)."""

from skulk_echo_provider.extension import EchoExtension

__all__ = ["EchoExtension"]
