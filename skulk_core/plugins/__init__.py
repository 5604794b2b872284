"""The pure half of managed plugins: what a plugin is trusted, configured and installed by.

- ``canonical.py``: canonical JSON, the bytes every signature and digest is taken over;
- ``node_configuration.py``: the settings and credential facets (``skulk.extensions``);
- ``trust.py``: publisher trust documents, their monotonic revisions and revocations;
- ``documents.py``: signed release and catalog documents, their bounds and the protocol
  window; ``verify.py``: Ed25519 verification and the admission decisions;
- ``supervision.py``: the owner restart schedule;
- ``review.py``: what an owner reviews (release and catalog), without addresses;
- ``errors.py``: every refusal, typed, with the spec's code.

What acts on these decisions (fetching, staging, sealing, the manager program) is
``skulk_host``.
"""
