"""Whether a model id can name a store directory, decided without I/O.

A model id is one directory under the store (``org/name`` becomes ``org--name``), so
an id with an empty, ``.`` or ``..`` component, a leading dot, a backslash or a NUL
is refused (400) before anything touches the disk or the network.
"""

from __future__ import annotations


def model_id_escapes(model_id: str) -> bool:
    if not model_id or model_id.startswith(".") or "\\" in model_id or "\x00" in model_id:
        return True
    return any(part in ("", ".", "..") for part in model_id.split("/"))
