"""What an entry's signed identity means for ``/v1/models``: pure functions.

:func:`~skulk_core.models.catalog.build_catalog` merges installed < registry < custom
cards; these read one merged entry and answer the spec's identity fields.
"""

from __future__ import annotations

from enum import StrEnum

from skulk_core.models.catalog import CatalogEntry, CatalogSource


class InstalledVerification(StrEnum):
    REGISTRY_VERIFIED = "registry_verified"
    LOCAL_LEGACY = "local_legacy"
    CUSTOM = "custom"
    UNRESOLVED = "unresolved"


def installed_verification(entry: CatalogEntry) -> InstalledVerification | None:
    """How the active installed generation is vouched for (``None``: nothing installed,
    unless a custom card owns the alias).

    A sidecar is written with a signed identity only after the store verified the
    bytes against that signed card, so the identity it records is what vouches for it.
    """
    if entry.catalog_source is CatalogSource.CUSTOM:
        return InstalledVerification.CUSTOM
    installed = entry.installed_card
    if not entry.installed or installed is None:
        return None
    if not installed.registry_card_id:
        return InstalledVerification.LOCAL_LEGACY
    return InstalledVerification.REGISTRY_VERIFIED


def current_registry_identity(entry: CatalogEntry) -> str | None:
    """The signed card id the registry publishes for this alias now, if any."""
    return entry.registry_card.registry_card_id if entry.registry_card is not None else None


def update_available(entry: CatalogEntry) -> bool:
    """A current signed generation exists and the installed one is not it (an older
    signed card, a custom card's bytes, or a legacy record without an identity)."""
    current = current_registry_identity(entry)
    installed = entry.installed_card if entry.installed else None
    return installed is not None and current is not None and installed.registry_card_id != current
