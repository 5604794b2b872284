"""The capability fabric: typed capability calls and streams between nodes.

``fabric.py`` (:class:`~skulk_daemon.capabilities.service.CapabilityService`, one per
node, what extensions and routes talk to), ``registry.py`` (providers, readiness,
concurrency bounds), ``pipeline.py`` (the guards and the unary pipeline, stream
admission), ``streams.py`` (the provider side of a stream's lifecycle), ``frames.py``
(what a valid frame is), ``session.py`` (the caller side: frames iterator and input
sink), ``schema.py`` (JSON Schema without remote references), ``gossip.py`` (tags and
capability-node summaries on the telemetry plane), and the built-in ``vad.py``. Calls
between nodes travel through :mod:`skulk_daemon.fabric.remote_capabilities`.
"""
