"""Runner subprocesses: one engine each, spoken to over length-prefixed msgpack frames.

``protocol`` is the wire, ``host`` the runner side (``python -m skulk_daemon.runner``),
``client`` the daemon side (:class:`~skulk_daemon.runner.client.RunnerProcess`).
"""
