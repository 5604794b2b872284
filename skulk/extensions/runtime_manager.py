"""``python -m skulk.extensions.runtime_manager serve|call --root ROOT``: the spec's fixed
local manager command. ``serve`` runs the manager on the owner-only socket under ROOT;
``call`` sends one JSON request from standard input. Implemented by
``skulk_host.plugin_manager``."""

import sys

from skulk_host.plugin_manager.cli import main

if __name__ == "__main__":
    sys.exit(main())

__all__ = ["main"]
