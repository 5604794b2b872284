"""``GET /models/search``: Hugging Face repository search with discovery metadata.

Synchronous (``huggingface-hub`` is); the service runs it in a thread. A query
ending in ``.gguf`` also runs a bounded filename-aware fallback: the model-name
prefix is broadened one separator at a time (at most :data:`MAX_FALLBACK_SEARCHES`
searches) until repositories turn up, the first :data:`MAX_FALLBACK_CANDIDATES` of
them have their file lists read, and only exact filename matches are returned, each
with the ``matched_file`` to pin.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

import msgspec

from skulk_core.models.hub_cards import (
    SPLIT_PATTERN,
    RepoFile,
    arxiv_ids,
    base_model_lineage,
    gguf_quants,
    tag_values,
)
from skulk_daemon.hub.client import HubClient

if TYPE_CHECKING:
    from huggingface_hub.hf_api import ModelInfo

MLX_AUTHOR: Final = "mlx-community"
MAX_FALLBACK_SEARCHES: Final = 4
MAX_FALLBACK_CANDIDATES: Final = 20
MIN_PREFIX_CHARS: Final = 3
SEARCH_TIMEOUT_SECONDS: Final = 5.0
"""Connect and read bound of one search request to the Hub."""
_QUANT_SUFFIX: Final = re.compile(r"[-_.](?:I?Q\d\w*|BF16|F16|F32|MXFP4\w*)$", re.IGNORECASE)
EXPAND: Final = [
    "author",
    "cardData",
    "config",
    "downloads",
    "gated",
    "gguf",
    "library_name",
    "likes",
    "pipeline_tag",
    "safetensors",
    "tags",
    "trendingScore",
]


class SearchResult(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    author: str | None = None
    downloads: int | None = None
    likes: int | None = None
    pipeline_tag: str | None = None
    library_name: str | None = None
    gated: bool = False
    license: str | None = None
    param_count: int | None = None
    total_file_size: int | None = None
    context_length: int | None = None
    base_model_repo: str | None = None
    base_model_relation: str | None = None
    arxiv_ids: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()
    architecture: str | None = None
    matched_file: str | None = None


def search_models(
    client: HubClient,
    *,
    query: str,
    limit: int,
    offset: int,
    mlx_only: bool,
    pipeline_tag: str | None,
) -> list[SearchResult]:
    found = client.call(
        query or "search",
        lambda: list(
            _list(client, query or None, limit + offset, mlx_only=mlx_only, task=pipeline_tag)
        ),
    )
    ordinary = [result_of(info) for info in found]
    if query.lower().endswith(".gguf"):
        matches = client.call(
            query, lambda: _filename_matches(client, query, mlx_only=mlx_only, task=pipeline_tag)
        )
        matched = {match.id for match in matches}
        ordinary = matches + [result for result in ordinary if result.id not in matched]
    return ordinary[offset : offset + limit]


def _list(
    client: HubClient, search: str | None, limit: int, *, mlx_only: bool, task: str | None
) -> list[ModelInfo]:
    """One page of ``GET /api/models``, as ``HfApi.list_models`` asks for it.

    NOTE: one request with a short timeout, not ``list_models``: that retries a
    connection failure five times with backoff (about 24 s), so with no reachable
    Hub a search hung instead of saying so. A search is interactive: it answers 502
    ("cannot reach the Hugging Face Hub") within :data:`SEARCH_TIMEOUT_SECONDS`.
    """
    # NOTE: huggingface_hub is imported by the first search, not at start-up.
    from huggingface_hub import get_session, hf_raise_for_status  # noqa: PLC0415
    from huggingface_hub.hf_api import ModelInfo  # noqa: PLC0415

    params: list[tuple[str, str | int | float | bool | None]] = [
        # An empty query lists what is trending; text queries sort by downloads.
        ("sort", "downloads" if search else "trendingScore"),
        ("limit", limit),
        *(("expand", field) for field in EXPAND),
    ]
    if search:
        params.append(("search", search))
    if mlx_only:
        params.append(("author", MLX_AUTHOR))
    if task:
        params.append(("pipeline_tag", task))
    session = get_session()
    headers = client.headers()
    response = session.get(
        f"{client.endpoint}/api/models",
        params=params,
        headers=headers,
        timeout=SEARCH_TIMEOUT_SECONDS,
    )
    models: list[ModelInfo] = []
    while True:
        hf_raise_for_status(response)
        listed = response.json()
        models += [
            ModelInfo(**{**item, "siblings": item.get("siblings")})  # type: ignore[no-untyped-call]
            for item in (listed if isinstance(listed, list) else [])
            if isinstance(item, dict)
        ]
        # The Hub pages a long listing (an offset past its page size) with Link headers.
        following = response.links.get("next", {}).get("url")
        if len(models) >= limit or not following:
            break
        response = session.get(following, headers=headers, timeout=SEARCH_TIMEOUT_SECONDS)
    return models[:limit]


def model_name(file_name: str) -> str:
    """The model-name part of a GGUF file name: no shard suffix, no quant label."""
    split = SPLIT_PATTERN.fullmatch(file_name)
    stem = split.group("stem") if split else file_name.removesuffix(".gguf")
    return _QUANT_SUFFIX.sub("", stem) or stem


def _prefixes(name: str) -> list[str]:
    cuts = [match.start() for match in re.finditer(r"[-_.]", name)]
    candidates = [name] + [name[:cut] for cut in reversed(cuts)]
    return [p for p in dict.fromkeys(candidates) if len(p) >= MIN_PREFIX_CHARS]


def _filename_matches(
    client: HubClient, query: str, *, mlx_only: bool, task: str | None
) -> list[SearchResult]:
    wanted = query.rsplit("/", 1)[-1].lower()
    candidates: list[ModelInfo] = []
    for prefix in _prefixes(model_name(wanted))[:MAX_FALLBACK_SEARCHES]:
        candidates = list(
            _list(client, prefix, MAX_FALLBACK_CANDIDATES, mlx_only=mlx_only, task=task)
        )
        if candidates:
            break
    matches: list[SearchResult] = []
    api = client.api()
    for candidate in candidates[:MAX_FALLBACK_CANDIDATES]:
        info = api.model_info(candidate.id, files_metadata=True, timeout=30)
        files = [
            RepoFile(path=s.rfilename, size=s.size or 0, sha256=s.lfs.sha256 if s.lfs else None)
            for s in info.siblings or ()
        ]
        for item in files:
            if item.path.rsplit("/", 1)[-1].lower() != wanted:
                continue
            group = next((q for q in gguf_quants(files) if item.path in q.files), None)
            result = result_of(candidate)
            matches.append(
                msgspec.structs.replace(
                    result,
                    matched_file=group.gguf_file if group is not None else item.path,
                    total_file_size=group.total_bytes if group is not None else item.size,
                )
            )
            break
    return matches


def result_of(info: ModelInfo) -> SearchResult:
    tags = list(info.tags or ())
    card = info.card_data
    gguf: dict[str, Any] = info.gguf if isinstance(info.gguf, dict) else {}
    config: dict[str, Any] = info.config if isinstance(info.config, dict) else {}
    base_repo, relation = base_model_lineage(tags)
    license_name = getattr(card, "license", None) if card is not None else None
    languages = getattr(card, "language", None) if card is not None else None
    if isinstance(languages, str):
        languages = [languages]
    architectures = config.get("architectures")
    architecture = gguf.get("architecture") or (
        architectures[0] if isinstance(architectures, list) and architectures else None
    )
    params = gguf.get("total")
    if info.safetensors is not None:
        params = info.safetensors.total
    return SearchResult(
        id=info.id,
        author=info.author,
        downloads=info.downloads,
        likes=info.likes,
        pipeline_tag=info.pipeline_tag,
        library_name=info.library_name,
        gated=bool(info.gated),
        license=license_name if isinstance(license_name, str) else _first(tags, "license:"),
        param_count=params if isinstance(params, int) else None,
        context_length=_int(gguf.get("context_length")),
        base_model_repo=base_repo,
        base_model_relation=relation,
        arxiv_ids=arxiv_ids(tags),
        languages=tuple(str(x) for x in languages)
        if isinstance(languages, list)
        else tag_values([t for t in tags if len(t) == 2], ""),
        architecture=architecture if isinstance(architecture, str) else None,
    )


def _first(tags: list[str], prefix: str) -> str | None:
    values = tag_values(tags, prefix)
    return values[0] if values else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
