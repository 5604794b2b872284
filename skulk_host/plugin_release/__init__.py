"""A plugin release's artifacts, as the manager fetches, checks and stages them.

- ``feed.py``: the HTTPS feed client (bounded, pinned, atomic downloads);
- ``source.py``: a release or catalog read from its signed source;
- ``host.py``: this host's facts (platform family, Skulk build);
- ``archive.py``: sealed bundle archives and their shims; ``wheels.py``: wheel
  inspection; ``installers.py``: the installer that lays wheels out;
- ``seal.py``: a staged generation's seal; ``staging.py``: staging a verified release.
"""
