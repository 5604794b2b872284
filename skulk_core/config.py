"""The ``skulk.yaml`` schema, parsed strictly.

Unknown keys and bad values are refused with a message naming the key. Secrets
(``hf_token``, ``cluster.key``, ``browser_tools.search_api_key``, ``api.keys``) are
stripped by :func:`public_view` before anything leaves the node's own files.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import msgspec

from skulk_core.cluster.telemetry import Participation
from skulk_core.models.kv_cache import LLAMA_CPP_SEQUENCES, KvCacheBackend
from skulk_core.placement.keep_alive import DEFAULT_KEEP_ALIVE, parse_keep_alive

SECRET_PLACEHOLDER_KEYS = ("hf_token",)


class FlashAttention(StrEnum):
    """Whether llama.cpp runners compute attention with flash attention (``auto``:
    llama.cpp decides, on where the backend supports it)."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class LoggingConfig(_Section, frozen=True, kw_only=True):
    level: LogLevel = LogLevel.INFO
    # When off, the API keeps no event export: GET /events answers [].
    event_log: bool = True


class ExperimentsConfig(_Section, frozen=True, kw_only=True):
    """Deprecated, accepted and ignored (see the spec's Configuration Endpoints)."""

    tts_streaming: bool | None = None
    stt_realtime: bool | None = None
    speech_translation: bool | None = None


class ModelTrustConfig(_Section, frozen=True, kw_only=True):
    """Deprecated compatibility state, preserved verbatim and never consulted."""

    approved_remote_code_identities: tuple[str, ...] = ()


DEFAULT_LOAD_TIMEOUT_SECONDS = 300.0
"""An on-demand load's bound (Ollama's own ``OLLAMA_LOAD_TIMEOUT`` default)."""
MAX_LOAD_TIMEOUT_SECONDS = 3600.0


MAX_PARALLEL_REQUESTS = 64
"""The most slots a runner may be given (each is a sequence of one llama.cpp context)."""


class InferenceConfig(_Section, frozen=True, kw_only=True):
    kv_cache_backend: KvCacheBackend = KvCacheBackend.DEFAULT
    """The type of llama.cpp runners' KV cells: ``q8_0`` holds a context in about
    half the memory of ``f16`` (the default), ``q4_0`` in about a quarter, at some
    cost in accuracy and, on a CPU, in prefill speed deep in a conversation (about a
    third slower for ``q8_0``, three fifths for ``q4_0``; see ``bench/README.md``); a
    quantized cache needs flash attention (not ``off``).
    ``SKULK_KV_CACHE_BACKEND`` overrides it. Read when a runner starts; the node
    advertises it, and a model it serves is placed with a KV window sized at it."""
    flash_attention: FlashAttention = FlashAttention.AUTO
    """Flash attention in llama.cpp runners: ``auto`` (llama.cpp decides; on for
    CPUs), ``on`` or ``off``. On a CPU, off prefills a turn deep in a conversation
    about a fifth faster and decodes there about a tenth slower (see
    ``bench/README.md``). Read when a runner starts."""
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """The output budget of a generation on an instruct card that names none
    (``max_tokens`` left out); unset: the built-in default. ``SKULK_MAX_OUTPUT_TOKENS``
    overrides it. Read per request."""
    default_max_tokens: Annotated[int, msgspec.Meta(ge=1)] = 256
    """The output budget of a generation on a base card that names none (``max_tokens``
    left out): a base model continues text until something stops it, so it stops
    here. Instruct cards end their turn themselves and keep the larger shared default.
    Read per request."""
    prompt_cache_mb: Annotated[int, msgspec.Meta(ge=0)] = 512
    """Host RAM each text runner may use to keep prompt prefixes its slots gave up
    (restored on a later match instead of prefilled again); 0 turns it off. Read
    when a runner starts."""
    parallel_requests: Annotated[int, msgspec.Meta(ge=1, le=MAX_PARALLEL_REQUESTS)] = (
        LLAMA_CPP_SEQUENCES
    )
    """How many requests one llama.cpp runner decodes at once (its slots; llama-server's
    ``--parallel``, Ollama's ``OLLAMA_NUM_PARALLEL``). Each slot holds a whole context
    window of KV cells, so placement sizes a window for each: fewer slots, a longer
    window in the same memory. The node advertises it. Read when a runner starts."""
    runner_threads: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """CPU threads each model runner computes with (llama.cpp's ``-t``); unset, all
    of this machine's cores. Lower it to leave cores to other work on the host.
    Read when a runner starts."""
    reuse_replies: bool = True
    """Reuse the KV cells a reply was generated into, and any common prefix however
    short, when a conversation comes back, as llama.cpp's server, Ollama and vLLM
    do: a later turn prefills only its new text, and nothing is decoded after a
    reply. Set it to ``false`` for the bit-exact mode: a temperature-0 (or seeded)
    request then reuses only cells a cold prefill would write bit for bit, so its
    output never depends on what the cache held (llama.cpp's CPU kernels round a
    one-token generation step differently from a batched prefill), and the runner
    settles replies while idle (``settle_idle_ms``). Read when a runner starts."""
    settle_idle_ms: Annotated[int, msgspec.Meta(ge=0)] = 500
    """Bit-exact mode only (``reuse_replies: false``): after this many idle
    milliseconds a text runner decodes the reply of a temperature-0 (or seeded)
    conversation again the way a cold prompt would, so its next turn reuses the
    reply instead of prefilling it; a request arriving meanwhile stops that at once.
    The default waits past the turnaround of a client that answers at once (a tool
    loop's next call), so only a pause such as a person's reading and typing is
    used. 0 turns it off. Read when a runner starts."""
    load_on_demand: bool = False
    """A request (chat, completions, embeddings, Claude, Ollama, Responses) for an
    installed model that no instance serves places it, as ``skulk place`` would, and
    waits up to ``load_timeout_seconds`` for it to be ready. Off by default: the spec
    answers 404 for an unplaced model. Read at every request."""
    keep_alive: str | float = DEFAULT_KEEP_ALIVE
    """How long an instance placed on demand stays once idle: a duration (``30s``,
    ``5m``, ``1h``) or seconds; negative keeps it until removed. An Ollama request's
    ``keep_alive`` overrides it for its model. Explicit placements always stay. Each
    placement records the value in effect when it was made."""
    load_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=MAX_LOAD_TIMEOUT_SECONDS)] = (
        DEFAULT_LOAD_TIMEOUT_SECONDS
    )
    """How long a request waits for an on-demand placement to become ready before it
    is answered 503."""

    def __post_init__(self) -> None:
        # msgspec reports a ValueError raised here as a validation error of the file.
        parse_keep_alive(self.keep_alive)
        _check_attention(
            self.kv_cache_backend,
            self.flash_attention,
            "set inference.flash_attention to auto or on, or kv_cache_backend to f16",
        )


def _check_attention(
    kv_cache: KvCacheBackend, flash_attention: FlashAttention, remedy: str
) -> None:
    if kv_cache.quantized and flash_attention is FlashAttention.OFF:
        raise ValueError(f"a {kv_cache.value} KV cache needs flash attention: {remedy}")


class StagingConfig(_Section, frozen=True, kw_only=True):
    staging_keep_recent_gb: Annotated[float, msgspec.Meta(ge=0)] = 40.0
    """The grace budget of idle copies staged from the store: when an instance on
    this node shuts down, and at start, the newest idle copies that fit it are kept
    and the older ones evicted."""
    cleanup_on_deactivate: bool = True
    """Off: every staged copy stays while the disk is healthy (staging another still
    evicts what ``staging_budget_gb`` and the disk reserve require)."""


DEFAULT_STORE_PORT = 12415


class ModelStoreConfig(_Section, frozen=True, kw_only=True):
    models_dir: str | None = None
    staging: StagingConfig = StagingConfig()
    store_host: bool = False
    """This node is the cluster's model store: it keeps the canonical bytes under
    ``store_path`` and serves them to the other nodes on ``store_port``."""
    store_path: str | None = None
    """Where the store keeps its models; unset: ``<data dir>/store``."""
    store_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = DEFAULT_STORE_PORT
    staging_budget_gb: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """The most GiB of copies staged from the store this node keeps: staging another
    evicts the least recently used idle copies first (never one a running instance
    uses), and is refused when it still does not fit. Unset: bounded by the disk."""
    reconcile_enabled: bool = True
    """The store host imports verified node-cache copies it lacks (reconciliation).
    False: its reconciler goes idle and re-checks every ten seconds; read live."""
    reconcile_inventory_only: bool = False
    """Reconciliation lists the identities it discovers without importing them (an
    optional rollout mode); read at every pass."""


class NodeConfig(_Section, frozen=True, kw_only=True):
    friendly_name: str | None = None
    participation: Participation = Participation.FULL
    memory_reserve_gb: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """RAM this node keeps for everything else on the machine: its telemetry reports
    that much less available, so placements plan against the rest."""
    memory_limit_gb: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """The most RAM Skulk's models may hold on this node, whatever else the machine has
    free: telemetry reports at most this much less what its runners already hold.
    Unset: no cap beyond the machine's own."""


class ClusterConfig(_Section, frozen=True, kw_only=True):
    key: str | None = None
    peers: tuple[str, ...] = ()
    fabric_port: int = 52416
    mdns: bool = True
    """Announce this node and find peers with mDNS on the LAN."""


class TelemetryConfig(_Section, frozen=True, kw_only=True):
    enabled: bool = False


class TracingConfig(_Section, frozen=True, kw_only=True):
    otlp_endpoint: str | None = None
    """An OpenTelemetry collector (``http://host:4318``): traced requests' spans are
    also exported there over OTLP/HTTP. Off when unset."""


class SearchProviderName(StrEnum):
    DUCKDUCKGO = "duckduckgo"
    SEARXNG = "searxng"


# The whole of one browser-tool call (every redirect hop and the body) must fit in this.
MAX_BROWSER_TIMEOUT_SECONDS = 120.0


class BrowserToolsConfig(_Section, frozen=True, kw_only=True):
    """``/v1/tools/web_search``, ``open_url`` and ``extract_page``."""

    # Off: URLs that resolve to loopback, private, link-local or reserved addresses are
    # refused (SSRF). On: LAN pages can be read; so can this node's own API and a cloud
    # metadata endpoint, which is why it is opt-in.
    allow_private_addresses: bool = False
    search_provider: SearchProviderName = SearchProviderName.DUCKDUCKGO
    # The provider's base URL: required for SearXNG; overrides DuckDuckGo's HTML endpoint.
    search_url: str | None = None
    # For providers that need one; a secret, never shown by GET /config or logged.
    search_api_key: str | None = None
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=MAX_BROWSER_TIMEOUT_SECONDS)] = 15.0


MAX_API_KEYS = 64


class ApiConfig(_Section, frozen=True, kw_only=True):
    """Who may use the HTTP API beyond the spec's authority classes."""

    # Optional API keys (also SKULK_API_KEYS, comma-separated): when any is set, every
    # caller not on this machine must send one (Authorization: Bearer or x-api-key).
    # Secrets: never shown by GET /config or logged.
    keys: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_API_KEYS)] = ()
    # Browser origins allowed to call the API cross-site (CORS); none by default.
    cors_origins: tuple[str, ...] = ()
    # Extra names this node is reached by (a DNS name, a MagicDNS name): requests whose
    # Host names none of this node's names or addresses are refused (DNS rebinding).
    hostnames: tuple[str, ...] = ()


REGISTRY_URL_PATTERN = r"^https?://[^\s/@?#]+(/[^\s?#]*)?$"
"""An http(s) base URL with no credentials, query or fragment (secrets never in URLs)."""


class RegistryConfig(_Section, frozen=True, kw_only=True):
    """The signed (TUF) model registry this node takes its catalog from."""

    # The repository's base URL: metadata under <url>/metadata/, targets under
    # <url>/targets/. Unset: no registry (the catalog is installed and custom cards).
    url: Annotated[str, msgspec.Meta(pattern=REGISTRY_URL_PATTERN)] | None = None
    # The trusted root.json to start from; unset: <data dir>/registry/root.json.
    root: str | None = None


DEFAULT_STEWARD_BRAIN = "local/gemma-3-270m-q4_k_m"
"""The steward's brain when none is configured: the packaged demo model."""


class IntelligentFabricConfig(_Section, frozen=True, kw_only=True):
    """Intelligent-fabric mode: the master keeps the steward placed (see the spec's
    Intelligent Fabric); ``brain_model`` is any installed, tool-capable text card."""

    enabled: bool = False
    brain_model: str = DEFAULT_STEWARD_BRAIN
    max_tool_calls: Annotated[int, msgspec.Meta(ge=1, le=8)] = 8
    """Tool calls in one steward turn, the baseline included (the spec's bound is 8; a
    slow CPU or a small brain answers sooner with fewer)."""


class SkulkConfig(_Section, frozen=True, kw_only=True):
    hf_token: str | None = None
    api: ApiConfig = ApiConfig()
    logging: LoggingConfig = LoggingConfig()
    experiments: ExperimentsConfig = ExperimentsConfig()
    model_trust: ModelTrustConfig = ModelTrustConfig()
    inference: InferenceConfig = InferenceConfig()
    model_store: ModelStoreConfig = ModelStoreConfig()
    node: NodeConfig = NodeConfig()
    cluster: ClusterConfig = ClusterConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    browser_tools: BrowserToolsConfig = BrowserToolsConfig()
    tracing: TracingConfig = TracingConfig()
    registry: RegistryConfig = RegistryConfig()
    intelligent_fabric: IntelligentFabricConfig = IntelligentFabricConfig()


class ConfigError(ValueError):
    """A configuration document was refused. The message names the offending key."""


def kv_cache_in_effect(
    inference: InferenceConfig, override: str | None, *, override_name: str
) -> KvCacheBackend:
    """The KV cache type runners get: ``override`` (the environment's, if set; named
    ``override_name`` in messages) or the file's, which parsing has already held to
    the flash-attention rule. Raises :class:`ConfigError` for an override that names
    no type, or a quantized one under the file's ``flash_attention: off``."""
    raw = (override or "").strip().lower()
    if not raw:
        return inference.kv_cache_backend
    try:
        kv_cache = KvCacheBackend(raw)
    except ValueError:
        choices = ", ".join(backend.value for backend in KvCacheBackend)
        raise ConfigError(f"{override_name} must be one of {choices}, got {raw!r}") from None
    try:
        _check_attention(
            kv_cache,
            inference.flash_attention,
            f"keep inference.flash_attention auto or on, or unset {override_name}",
        )
    except ValueError as exc:
        raise ConfigError(f"invalid value for {override_name}: {exc}") from None
    return kv_cache


def parse_config(document: object) -> SkulkConfig:
    """Validate an already-parsed YAML/JSON document (``None`` means empty)."""
    if document is None:
        return SkulkConfig()
    if not isinstance(document, dict):
        raise ConfigError("the configuration must be a mapping of keys to values")
    try:
        return msgspec.convert(_yaml_switches(document), SkulkConfig, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _yaml_switches(document: dict[str, object]) -> dict[str, object]:
    """``inference.flash_attention`` written ``on``/``off`` unquoted: YAML reads a
    bare ``on`` as true, so a boolean there means the switch of that name."""
    inference = document.get("inference")
    if isinstance(inference, dict) and isinstance(inference.get("flash_attention"), bool):
        switch = FlashAttention.ON if inference["flash_attention"] else FlashAttention.OFF
        return {**document, "inference": {**inference, "flash_attention": switch.value}}
    return document


def _describe(exc: msgspec.ValidationError) -> str:
    # msgspec says "Object contains unknown field `x` - at `$.logging`"; name the key
    # the way an operator writes it in skulk.yaml.
    text = str(exc)
    message, _, where = text.partition(" - at `")
    path = where.rstrip("`").removeprefix("$").lstrip(".")
    if "unknown field `" in message:
        field = message.split("`")[1]
        key = f"{path}.{field}" if path else field
        return f"unknown configuration key '{key}'"
    if path:
        return f"invalid value for '{path}': {message}"
    return message


def to_document(config: SkulkConfig) -> dict[str, Any]:
    """The config as plain builtins, defaults included, in file (snake_case) form."""
    result: dict[str, Any] = msgspec.to_builtins(config)
    return result


def public_view(config: SkulkConfig) -> dict[str, Any]:
    """What ``GET /config`` may show: secrets removed."""
    document = to_document(config)
    document.pop("hf_token", None)
    cluster = document.get("cluster")
    if isinstance(cluster, dict):
        cluster.pop("key", None)
    browser_tools = document.get("browser_tools")
    if isinstance(browser_tools, dict):
        browser_tools.pop("search_api_key", None)
    api = document.get("api")
    if isinstance(api, dict):
        api.pop("keys", None)
    return document


TRUST_KEYS: tuple[str, ...] = (
    "cluster.key",
    "cluster.peers",
    "cluster.mdns",
    "model_store.models_dir",
    # A store host serves store_path to the cluster and adopts what it holds as installed
    # models, on store_port; the Hugging Face token is the node's identity at the hub.
    "model_store.store_host",
    "model_store.store_path",
    "model_store.store_port",
    "hf_token",
    "browser_tools.allow_private_addresses",
    "browser_tools.search_url",
    "browser_tools.search_api_key",
    "api.keys",
    "api.cors_origins",
    "api.hostnames",
    "tracing.otlp_endpoint",
    "registry.url",
    "registry.root",
)
"""Keys that change where secrets go or whom the node trusts: ``PUT /config`` may change
them only from this machine or through the operator gateway."""


SECRET_KEYS: tuple[str, ...] = (
    "hf_token",
    "cluster.key",
    "browser_tools.search_api_key",
    "api.keys",
)
"""Write-only settings: :func:`public_view` never shows them; a client learns only
whether each is set (``GET /config``'s ``editing.secrets``)."""

RESTART_KEYS: tuple[str, ...] = (
    "cluster.key",
    "cluster.peers",
    "cluster.fabric_port",
    "cluster.mdns",
    "node.friendly_name",
    "node.participation",
    "model_store.models_dir",
    "model_store.store_port",
    "api.cors_origins",
    "logging.level",
)
"""Keys the node reads once, when its process starts: a change is saved at once but
takes effect after a restart (``POST /admin/restart``)."""


def secrets_set(config: SkulkConfig) -> dict[str, bool]:
    """Whether each of :data:`SECRET_KEYS` holds a value (never the value)."""
    return {key: bool(_value(config, key)) for key in SECRET_KEYS}


def trust_changes(current: SkulkConfig, merged: SkulkConfig) -> list[str]:
    """The :data:`TRUST_KEYS` whose value differs between ``current`` and ``merged``."""
    return [key for key in TRUST_KEYS if _value(current, key) != _value(merged, key)]


def _value(config: SkulkConfig, key: str) -> object:
    value: object = config
    for name in key.split("."):
        value = getattr(value, name)
    return value


def merge_update(current: SkulkConfig, incoming: SkulkConfig, present: set[str]) -> SkulkConfig:
    """Apply ``PUT /config``'s preservation rules.

    The update replaces the whole config, except that ``hf_token``, ``logging``,
    ``experiments``, ``model_trust`` and ``intelligent_fabric`` (cluster-wide, like
    ``logging``) keep their current values when the request
    omits them (``present`` holds the top-level keys the request carried), and a
    blank ``hf_token`` never erases a stored one. ``cluster.key`` is a secret that
    GET never shows, so an update cannot be expected to carry it: it is kept too, and so
    are ``browser_tools.search_api_key`` and ``api.keys`` for the same reason. The search
    key is kept only while it goes where it went: an update that points
    ``browser_tools.search_url`` elsewhere without supplying a key drops the stored one,
    or the next search would hand it to the new URL. (The other secrets have no
    destination in the config: the hub endpoint for ``hf_token`` is not configured
    here, and ``cluster.key`` and ``api.keys`` are never sent to anyone.)
    """
    replace = msgspec.structs.replace
    merged = incoming
    if "hf_token" not in present or not (incoming.hf_token or "").strip():
        merged = replace(merged, hf_token=current.hf_token)
    for key in ("logging", "experiments", "model_trust", "intelligent_fabric"):
        if key not in present:
            merged = replace(merged, **{key: getattr(current, key)})
    if merged.cluster.key is None and current.cluster.key is not None:
        merged = replace(merged, cluster=replace(merged.cluster, key=current.cluster.key))
    if not merged.api.keys and current.api.keys:
        merged = replace(merged, api=replace(merged.api, keys=current.api.keys))
    tools, current_tools = merged.browser_tools, current.browser_tools
    if (
        tools.search_api_key is None
        and current_tools.search_api_key is not None
        and _search_endpoint(tools.search_url) == _search_endpoint(current_tools.search_url)
    ):
        merged = replace(
            merged, browser_tools=replace(tools, search_api_key=current_tools.search_api_key)
        )
    return merged


def _search_endpoint(search_url: str | None) -> str | None:
    # The URL as the search providers read it: surrounding blanks and a trailing slash
    # do not change where a request goes.
    return (search_url or "").strip().rstrip("/") or None
