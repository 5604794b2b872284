"""Model bytes on this node: installed-card sidecars and the bundled demo model."""

from skulk_daemon.models.installed import load_installed_models

__all__ = ["load_installed_models"]
