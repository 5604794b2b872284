import sys

from skulk_daemon.runner.host import main

sys.exit(main())
