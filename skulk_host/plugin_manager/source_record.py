"""An installation's release source (``source.json``), and how ``configure_source``
changes it: a pure decision, the token file and the record being the manager's to
write."""

from __future__ import annotations

import msgspec

from skulk_core.plugins.errors import refuse
from skulk_core.plugins.trust import PublisherTrust, advance_trust, parse_trust
from skulk_core.plugins.verify import ReleaseFloor
from skulk_host.plugin_manager.protocol import SourceUpdate
from skulk_host.plugin_release.feed import FeedSource


class SourceRecord(msgspec.Struct, frozen=True, kw_only=True):
    revision: int = 0
    base_url: str | None = None
    metadata_filename: str = "release.json"
    trust: PublisherTrust | None = None
    credential_reference: str | None = None
    release_floor: ReleaseFloor | None = None


def next_source(
    current: SourceRecord,
    update: SourceUpdate,
    *,
    installing: bool,
    now: int,
    new_reference: str,
) -> SourceRecord:
    """The record ``update`` makes of ``current`` (raises the refusal when it may not):
    under the revision fence, never while an install downloads; initial setup needs
    the directory and the trust, trust only advances, and moving a credential-bearing
    source needs the token again (stored under ``new_reference``) or ``clear_token``."""
    if update.expected_revision != current.revision:
        raise refuse(
            "malformed",
            f"expected_revision {update.expected_revision} is not the source revision "
            f"{current.revision}: read the source status again.",
        )
    if installing:
        raise refuse("malformed", "An installation download is under way for this plugin.")
    base_url = update.base_url or current.base_url
    filename = update.metadata_filename or current.metadata_filename
    if base_url is None:
        raise refuse("source_invalid", "Initial source setup needs the HTTPS directory.")
    FeedSource(base_url).url(filename)  # validates both
    trust = current.trust
    if update.trust is not None:
        trust = advance_trust(current.trust, parse_trust(update.trust), now)
    if trust is None:
        raise refuse("source_invalid", "Initial source setup needs the publisher trust.")
    reference = current.credential_reference
    if update.token is not None:
        reference = new_reference
    elif update.clear_token:
        reference = None
    elif base_url != current.base_url and current.credential_reference is not None:
        raise refuse(
            "source_invalid",
            "Moving a source that holds a credential needs the credential again (or clear_token).",
        )
    return msgspec.structs.replace(
        current,
        revision=current.revision + 1,
        base_url=base_url,
        metadata_filename=filename,
        trust=trust,
        credential_reference=reference,
    )
