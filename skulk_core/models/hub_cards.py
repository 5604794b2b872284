"""Cards for Hugging Face repositories, built from what the Hub says about them.

Pure: the daemon fetches (``config.json``, a ranged read of a GGUF header, the file
listing) and this module decides. A card is always pinned: ``source_revision`` is
the 40-hex commit the daemon resolved ``main`` to once, or the one the caller gave.

GGUF repositories hold several quantizations, some split into shard groups
(``name-Q4_K_M-00001-of-00003.gguf``). :func:`gguf_quants` groups them, one option
per quantization with its first shard as the entrypoint the backend loads, and
leaves out companions (multimodal projectors, imatrix calibration files,
speculative drafters) that are not models of their own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard, ModelTask
from skulk_core.models.custom_cards import SOURCE_REVISION_PATTERN
from skulk_core.models.gguf import GgufHeader
from skulk_core.models.requirements import MAX_MODEL_ID_CHARS

GGUF_BACKENDS: Final = ("llama_cpp",)
SAFETENSORS_BACKENDS: Final = ("mlx",)
_NAME_PART: Final = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
REPO_ID_PATTERN: Final = re.compile(rf"{_NAME_PART}/{_NAME_PART}")
SPLIT_PATTERN: Final = re.compile(r"(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf")
QUANT_PATTERN: Final = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]{1,4}){0,3}|BF16|F16|F32|MXFP4(?:_MOE)?|TQ\d_0)"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
COMPANION_MARKERS: Final = ("mmproj", "imatrix", "draft", "-mtp", "_mtp", "projector")
# Without a pin, the first of these present wins; else the smallest option.
DEFAULT_QUANT_PREFERENCE: Final = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q6_K", "Q8_0")
MAX_SUMMARY_CHARS: Final = 600
MAX_REPO_PATH_CHARS: Final = 1024


class HubCardError(ValueError):
    """The repository cannot be made into a card; the message says why."""


class RepoFile(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a repository at a commit, as the Hub lists it."""

    path: str
    size: int
    sha256: str | None = None
    """The LFS object id (SHA-256 of the content); ``None`` for small git blobs."""
    blob_id: str | None = None
    """The git blob SHA-1; what the Hub's ETag is for a non-LFS file."""


class GgufQuant(msgspec.Struct, frozen=True, kw_only=True):
    """One downloadable quantization: ``gguf_file`` is its first shard."""

    gguf_file: str
    label: str
    total_bytes: int
    shard_count: int
    files: tuple[str, ...] = ()


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` if it is an ``owner/name`` Hugging Face id, else :class:`HubCardError`."""
    if not 1 <= len(repo_id) <= MAX_MODEL_ID_CHARS or REPO_ID_PATTERN.fullmatch(repo_id) is None:
        raise HubCardError(
            "model_id must be a Hugging Face repository id, owner/name "
            "(letters, digits, '.', '_' and '-')"
        )
    if any(part in (".", "..") or part.endswith(".") for part in repo_id.split("/")):
        raise HubCardError("model_id must not contain '.' or '..' path segments")
    return repo_id


def check_revision(revision: str) -> str:
    if SOURCE_REVISION_PATTERN.fullmatch(revision) is None:
        raise HubCardError(
            "source_revision must be a full 40-character lowercase hexadecimal commit hash"
        )
    return revision


def is_safe_repo_path(path: str) -> bool:
    """Whether ``path`` is a plain repo-relative file path that stays inside a model dir."""
    if not path or len(path) > MAX_REPO_PATH_CHARS or path.startswith("/"):
        return False
    if "\\" in path or "\0" in path or ":" in path.split("/", maxsplit=1)[0]:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def check_listing(files: Sequence[RepoFile]) -> None:
    """Refuse a listing naming a path that would escape the model directory."""
    for item in files:
        if not is_safe_repo_path(item.path):
            raise HubCardError(
                f"the repository lists an unsafe path {item.path!r}; refusing to use it"
            )


def quant_label(file_name: str) -> str:
    base = file_name.rsplit("/", 1)[-1]
    split = SPLIT_PATTERN.fullmatch(base)
    stem = split.group("stem") if split else base.removesuffix(".gguf")
    found = QUANT_PATTERN.findall(stem)
    return found[-1].upper() if found else stem


def is_companion(file_name: str) -> bool:
    base = file_name.rsplit("/", 1)[-1].lower()
    return any(marker in base for marker in COMPANION_MARKERS)


def gguf_quants(files: Sequence[RepoFile]) -> list[GgufQuant]:
    """Every complete GGUF quantization in ``files``, smallest first."""
    singles: list[GgufQuant] = []
    groups: dict[tuple[str, int], dict[int, RepoFile]] = {}
    for item in files:
        if not item.path.lower().endswith(".gguf") or is_companion(item.path):
            continue
        directory, _, base = item.path.rpartition("/")
        split = SPLIT_PATTERN.fullmatch(base)
        if split is None:
            singles.append(
                GgufQuant(
                    gguf_file=item.path,
                    label=quant_label(item.path),
                    total_bytes=item.size,
                    shard_count=1,
                    files=(item.path,),
                )
            )
            continue
        prefix = f"{directory}/{split.group('stem')}" if directory else split.group("stem")
        count = int(split.group("count"))
        groups.setdefault((prefix, count), {})[int(split.group("index"))] = item
    for (_, count), shards in groups.items():
        if sorted(shards) != list(range(1, count + 1)):
            continue  # an incomplete shard group cannot be loaded
        ordered = [shards[index] for index in range(1, count + 1)]
        singles.append(
            GgufQuant(
                gguf_file=ordered[0].path,
                label=quant_label(ordered[0].path),
                total_bytes=sum(item.size for item in ordered),
                shard_count=count,
                files=tuple(item.path for item in ordered),
            )
        )
    return sorted(singles, key=lambda quant: (quant.total_bytes, quant.gguf_file))


def select_quant(quants: Sequence[GgufQuant], gguf_file: str | None) -> GgufQuant | None:
    """The pinned quant (``gguf_file`` must name a whole file or first shard exactly),
    else Skulk's default preference; ``None`` when the repository has no GGUF."""
    if gguf_file is not None:
        for quant in quants:
            if gguf_file == quant.gguf_file:
                return quant
        for quant in quants:
            if gguf_file in quant.files:
                raise HubCardError(
                    f"gguf_file {gguf_file!r} is a later shard; pin the first shard "
                    f"{quant.gguf_file!r}"
                )
        raise HubCardError(
            f"gguf_file {gguf_file!r} is not a GGUF weight file in this revision of the "
            "repository; GET /models/gguf-quants lists the exact names"
        )
    if not quants:
        return None
    for preferred in DEFAULT_QUANT_PREFERENCE:
        for quant in quants:
            if quant.label == preferred:
                return quant
    return quants[0]


def card_from_gguf(
    *,
    model_id: str,
    header: GgufHeader,
    gguf_file: str,
    storage_bytes: int,
    source_repository: str | None,
    source_revision: str | None,
    is_custom: bool = True,
) -> ModelCard:
    """A card whose geometry comes from the GGUF header (never guessed)."""
    n_layers = header.block_count
    if n_layers is None or n_layers < 1:
        raise HubCardError(f"{gguf_file} declares no block count in its GGUF header")
    name = header.metadata.get("general.name")
    return ModelCard(
        model_id=ModelId(model_id),
        storage_size=Memory(in_bytes=storage_bytes),
        n_layers=n_layers,
        tasks=(ModelTask.TEXT_GENERATION,),
        hidden_size=_positive(header.embedding_length),
        source_repository=source_repository,
        source_revision=source_revision,
        gguf_file=gguf_file,
        architecture=header.architecture,
        context_length=_positive(header.context_length),
        num_key_value_heads=_positive(header.head_count_kv),
        head_dim=_positive(header.key_length),
        num_attention_heads=_positive(header.head_count),
        chat_template=header.chat_template,
        compatible_backends=GGUF_BACKENDS,
        quantization=header.quantization or quant_label(gguf_file),
        display_name=name if isinstance(name, str) and name.strip() else None,
        is_custom=is_custom,
    )


def card_from_config(
    *,
    model_id: str,
    config: Mapping[str, Any],
    storage_bytes: int,
    source_revision: str,
) -> ModelCard:
    """A card from a transformers ``config.json`` (safetensors weights)."""
    text = config.get("text_config")
    cfg: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if n_layers is None or n_layers < 1:
        raise HubCardError("config.json declares no num_hidden_layers")
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, "num_attention_heads", "n_head")
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    head_dim = _int(cfg, "head_dim")
    if head_dim is None and hidden and heads and hidden % heads == 0:
        head_dim = hidden // heads
    architectures = config.get("architectures")
    architecture = (
        architectures[0]
        if isinstance(architectures, list) and architectures and isinstance(architectures[0], str)
        else config.get("model_type")
    )
    return ModelCard(
        model_id=ModelId(model_id),
        storage_size=Memory(in_bytes=storage_bytes),
        n_layers=n_layers,
        tasks=(ModelTask.TEXT_GENERATION,),
        hidden_size=hidden,
        source_repository=model_id,
        source_revision=source_revision,
        architecture=architecture if isinstance(architecture, str) else None,
        context_length=_int(cfg, "max_position_embeddings", "n_positions"),
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        num_attention_heads=heads,
        compatible_backends=SAFETENSORS_BACKENDS,
        is_custom=True,
    )


def weight_bytes(files: Sequence[RepoFile]) -> int:
    """Bytes of the safetensors weights in a listing (the non-GGUF storage size)."""
    return sum(item.size for item in files if item.path.endswith(".safetensors"))


def _int(cfg: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = cfg.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _positive(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


# -- discovery metadata -----------------------------------------------------------

_RELATIONS: Final = ("finetune", "quantized", "merge", "adapter")


def base_model_lineage(tags: Sequence[str]) -> tuple[str | None, str | None]:
    """(base_model_repo, base_model_relation) from the Hub's ``base_model:*`` tags."""
    for tag in tags:
        parts = tag.split(":")
        if len(parts) == 3 and parts[0] == "base_model" and parts[1] in _RELATIONS:
            return parts[2], parts[1]
    for tag in tags:
        parts = tag.split(":")
        if len(parts) == 2 and parts[0] == "base_model":
            return parts[1], None
    return None, None


def arxiv_ids(tags: Sequence[str]) -> tuple[str, ...]:
    return tuple(tag.removeprefix("arxiv:") for tag in tags if tag.startswith("arxiv:"))


def tag_values(tags: Sequence[str], prefix: str) -> tuple[str, ...]:
    return tuple(tag.removeprefix(prefix) for tag in tags if tag.startswith(prefix))


# -- README summaries ---------------------------------------------------------------

_FRONT_MATTER: Final = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)
_FENCE: Final = re.compile(r"```.*?```|~~~.*?~~~", re.DOTALL)
_HTML_COMMENT: Final = re.compile(r"<!--.*?-->", re.DOTALL)
_TAG: Final = re.compile(r"<[^>]{0,500}>")
_IMAGE: Final = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK: Final = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_EMPHASIS: Final = re.compile(r"(\*\*|__|\*|`)")


def readme_summary(readme: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """The first prose paragraphs of a model card README, markup stripped, bounded."""
    text = _FRONT_MATTER.sub("", readme)
    text = _FENCE.sub("\n\n", text)
    text = _HTML_COMMENT.sub("", text)
    text = _IMAGE.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _TAG.sub("", text)
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.strip().splitlines()]
        if not lines or all(not line for line in lines):
            continue
        if any(line.startswith(("#", "|", ">", "-", "*", "+", "=")) for line in lines[:1]):
            continue
        prose = " ".join(_EMPHASIS.sub("", line) for line in lines if line).strip()
        if len(prose) < 20 or not any(ch.isalpha() for ch in prose):
            continue
        paragraphs.append(prose)
        if sum(len(p) for p in paragraphs) >= limit:
            break
    summary = "\n\n".join(paragraphs)
    if len(summary) > limit:
        summary = summary[: limit - 1].rstrip() + "…"
    return summary
