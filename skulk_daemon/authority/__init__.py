"""Request authority: who may call which route on the API port, enforced in one place.

Every route declares a :class:`~skulk_daemon.authority.policy.Requirement` (in its
controller's ``opt``, or its own); the guard in :mod:`skulk_daemon.api.authority`
checks it, with the browser defences (``Host``, content type, ``Origin``) and the
optional API keys, before any handler runs.
"""
