"""The running Skulk version, read once from the installed distribution."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    SKULK_VERSION = version("skulk")
except PackageNotFoundError:  # a source tree that was never installed
    SKULK_VERSION = "0.0.0+unknown"
