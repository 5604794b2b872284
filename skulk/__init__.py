"""``skulk``: the public Python surface plugins are written against.

This package holds no logic. It gives the import paths the extension contract names
(``skulk.extensions``, ``skulk.shared.types.capability_nodes``,
``skulk.shared.types.text_generation``) over the modules that implement them:

- ``skulk.extensions`` re-exports ``skulk_daemon.extensions`` (context, middleware,
  lifecycle, the capability types) and the settings and credential facets of
  ``skulk_core.plugins.node_configuration``;
- ``skulk.shared.types.capability_nodes`` re-exports
  ``skulk_core.extensions.capability_nodes``;
- ``skulk.shared.types.text_generation`` names the normalized chat request
  (``TextGenerationTaskParams``) and its message type.

A plugin that imports only from ``skulk.*`` keeps working when the modules behind it
move; anything reachable here is a public contract. ``tests/test_layering.py`` holds
this package to re-exports: it may import ``skulk_core`` and the daemon's public
extension package (``skulk_daemon.extensions``) and nothing else of the daemon.
"""
