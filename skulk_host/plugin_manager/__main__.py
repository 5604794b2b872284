"""``python -m skulk_host.plugin_manager``: see ``cli.py``."""

import sys

from skulk_host.plugin_manager.cli import main

sys.exit(main())
