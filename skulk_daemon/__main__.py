import sys

from skulk_daemon.serve import main

sys.exit(main())
