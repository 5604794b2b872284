"""Managed plugins on a host: fetching, checking and staging signed releases.

- ``feed.py``: the one HTTPS release directory (no redirects, no encodings, bounds);
- ``release_source.py``: inspect (metadata only, verified first) and download;
- ``wheels.py``: a wheel checked as data before anything installs it;
- ``installers.py``: the offline installers (``uv``, or stdlib venv + pip);
- ``staging.py``: one sealed generation per release digest, journaled;
- ``seal.py``: the staged runtime's manifest and its check before it runs;
- ``host.py``: this host's facts (artifact family, Python, Skulk build);
- ``connection.py``: the protected record a host finds its manager through;
- ``manager/``: the local manager process and its owner-only socket.

The pure decisions (canonical JSON, signatures, trust, windows, rollbacks) are
``skulk_core.plugins``.
"""
