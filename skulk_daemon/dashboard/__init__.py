"""The dashboard: the web UI every node serves on its API port.

``static/`` holds the page (plain ES modules, no build step); :mod:`.assets` reads it
into memory once, framework-free. The HTTP routes that answer it are
``skulk_daemon/api/dashboard.py``, under the same authority policy as every route.
"""
