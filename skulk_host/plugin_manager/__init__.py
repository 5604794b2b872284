"""The local plugin manager: a separate process owning installations and their
lifecycle, reached only through its owner-only Unix socket.

- ``protocol.py``: the wire (requests, responses, bounds);
- ``store.py``: the durable state under the manager root (atomic writes, the fence);
- ``lifecycle.py``: the verbs and the journaled lifecycle operations;
- ``releases.py``: the release source, inspection and the journaled install;
- ``catalog.py``: the host's signed catalog (discovery only);
- ``supervisor.py``: each enabled installation's owner process, with restart backoff;
- ``server.py``: the socket (owner-only, 8 clients, 16 KiB / 256 KiB, 30 s);
- ``client.py``: one request per connection, for the terminal and the host;
- ``connection.py``: the protected record a host finds its manager through;
- ``local_command.py``: an installed plugin's verified setup or management command;
- ``cli.py``: ``serve|call --root ROOT`` (``python -m skulk_host.plugin_manager``, or
  the spec's ``python -m skulk.extensions.runtime_manager``).
"""
