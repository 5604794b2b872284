"""The steward's ``/v1/models`` entry: the virtual model, flagged ``system_role``."""

from __future__ import annotations

import msgspec

from skulk_core.config import IntelligentFabricConfig
from skulk_core.ids import ModelId
from skulk_core.models.catalog import Catalog
from skulk_core.models.listing import ModelListItem, model_list_item
from skulk_core.steward.lifecycle import STEWARD_DISPLAY_NAME, STEWARD_MODEL_ID, STEWARD_ROLE


def steward_entries(fabric: IntelligentFabricConfig, catalog: Catalog) -> tuple[ModelListItem, ...]:
    """One entry while intelligent-fabric mode is on and its brain is in the catalog
    (the brain's capabilities, under the reserved id and the operator-facing name)."""
    entry = catalog.get(ModelId(fabric.brain_model)) if fabric.enabled else None
    if entry is None:
        return ()
    item = model_list_item(entry)
    return (
        msgspec.structs.replace(
            item,
            id=STEWARD_MODEL_ID,
            name=STEWARD_DISPLAY_NAME,
            owned_by="skulk",
            base_model=fabric.brain_model,
            system_role=STEWARD_ROLE,
        ),
    )
