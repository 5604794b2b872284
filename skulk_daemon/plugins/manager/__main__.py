"""``python -m skulk_daemon.plugins.manager``: see ``cli.py``."""

import sys

from skulk_daemon.plugins.manager.cli import main

sys.exit(main())
