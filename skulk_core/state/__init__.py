"""The ordered cluster State: events, commands, ``apply``, the master's ``decide``,
instances and runner statuses."""
