"""One module per command group; each one parses options, calls the client, renders."""
