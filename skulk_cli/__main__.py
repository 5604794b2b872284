"""`python -m skulk_cli`, the same as the `skulk` console script."""

from skulk_cli.main import main

main()
