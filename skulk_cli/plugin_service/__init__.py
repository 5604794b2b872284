"""``skulk-plugin-service``: the owner's terminal for the local plugin manager.

It lives in the CLI layer (Typer + rich, like ``skulk``) and, since ``skulk_cli`` never
imports ``skulk_daemon``, reaches the manager only over its socket, through the one
client the daemon uses too (``skulk_host.plugin_manager.client``, the protected
connection record in ``skulk_host.plugin_manager.connection``), and starts it only as
a separate process (``python -m skulk.extensions.runtime_manager serve``).

- ``setup.py``: the service root, the setup record and the connection record;
- ``staging.py``: the sealed copy of this environment the manager runs from;
- ``registration.py``: the system service (a systemd system unit, a launchd daemon)
  through the fixed sudo helper ``system_helper.py``, or the honest statement that no
  service manager runs here;
- ``guided.py``: the guided ``install-plugin`` (trust, review, separate consents);
- ``main.py``: the Typer app (``setup``, ``status``, ``serve``, ``manage``,
  ``install-plugin``, ``catalog``, ``uninstall``, ``purge-plugin``).
"""
