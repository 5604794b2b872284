"""Asynchronous media jobs (video and music): the job store, the services that admit
and run them, and the container checks that complete them."""
