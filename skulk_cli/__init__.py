"""The `skulk` command line: a Typer + rich front end that talks to a node over HTTP."""
