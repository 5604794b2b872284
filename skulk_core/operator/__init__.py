"""Operator device pairing: the pure half shared by the gateway and its clients.

Transcripts a device signs, the ``skulk://pair`` package codec, the spec's bounds,
canonical scopes and relay provisioning validation. No I/O, no frameworks.
"""
