"""``python -m skulk_cli.plugin_service``: the same as ``skulk-plugin-service``."""

from skulk_cli.plugin_service.main import main

main()
