"""Is a release directory reachable? Asked before the guided install's trust questions.

The owner types the directory and the metadata filename first; this reads that file
once, the way the manager will (the same TLS trust: the CA given to ``setup
--tls-ca``, else the system store; no proxy from the environment, no redirects), so
an unreachable or mistyped feed is said at once, before any question about publishers
and keys, and before an installation is registered. A 401 or 403 counts as reachable:
the feed's bearer is asked for later.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Final

import httpx

from skulk_core.plugins.errors import PluginRefusal
from skulk_host.plugin_release.feed import FeedSource

PROBE_TIMEOUT_SECONDS: Final = 10.0

Probe = Callable[[str, str], None]
"""``probe(base_url, filename)``: returns when the feed answers; raises
:class:`FeedUnreachable` with the sentence to show when it does not."""


class FeedUnreachable(Exception):
    """The release directory cannot be read from here; the message says why."""


def feed_tls(ca_file: str | None) -> ssl.SSLContext:
    """The manager's feed trust (``plugin_manager/cli.py``): one CA file, or the system's."""
    if ca_file is None:
        return ssl.create_default_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=ca_file)
    return context


def probe_feed(tls: ssl.SSLContext) -> Probe:
    def probe(base_url: str, filename: str) -> None:
        try:
            source = FeedSource(base_url)
            url = source.url(filename)
        except PluginRefusal as refusal:
            raise FeedUnreachable(refusal.message) from None
        try:
            with httpx.Client(verify=tls, follow_redirects=False, trust_env=False) as client:
                status = client.get(
                    url, headers=source.headers(), timeout=PROBE_TIMEOUT_SECONDS
                ).status_code
        except httpx.HTTPError as exc:
            raise FeedUnreachable(
                f"The release directory {base_url} cannot be reached from this host "
                f"({type(exc).__name__}): check the address (and `setup --tls-ca` for a "
                "private CA)."
            ) from None
        if status in (401, 403) or 200 <= status < 300:
            return
        if status == 404:
            raise FeedUnreachable(f"The release directory {base_url} has no {filename}.")
        raise FeedUnreachable(
            f"The release directory {base_url} answered HTTP {status} for {filename}."
        )

    return probe
