"""What runs on a host outside the node process, and the protected files both the CLI
and the daemon touch.

- ``files.py`` / ``fsutil.py``: atomic owner-only writes, directory fsync, flock fences,
  private directories;
- ``plugin_manager/``: the local plugin manager program (its socket, store, lifecycle,
  releases, catalog, owner supervisor), its one socket client and the connection record
  a host finds it through;
- ``plugin_release/``: a release's artifacts: signed feeds and release sources, bundle
  archives, wheels, seals and staging into a generation;
- ``plugin_service/``: the manager's staged runtime: staging, the seal walk the bootstrap
  runs, generations and their removal;
- ``plugin_owners/``: the owner-only socket protocol between Skulk and a managed owner.

It imports only the standard library, third-party libraries and ``skulk_core``; never
the daemon, the CLI or a web or CLI framework (a test enforces it).
"""
