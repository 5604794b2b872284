import pytest

from skulk_core.config import (
    MAX_BROWSER_TIMEOUT_SECONDS,
    BrowserToolsConfig,
    ConfigError,
    FlashAttention,
    InferenceConfig,
    LogLevel,
    SearchProviderName,
    SkulkConfig,
    kv_cache_in_effect,
    merge_update,
    parse_config,
    public_view,
)
from skulk_core.models.kv_cache import KvCacheBackend


def test_empty_document_is_the_default_config() -> None:
    assert parse_config(None) == SkulkConfig()
    assert parse_config({}) == SkulkConfig()


def test_unknown_key_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'logging.colour'"):
        parse_config({"logging": {"colour": "red"}})
    with pytest.raises(ConfigError, match=r"'nonsense'"):
        parse_config({"nonsense": 1})


def test_bad_value_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'inference.kv_cache_backend'"):
        parse_config({"inference": {"kv_cache_backend": "q3_lol"}})
    for slots in (0, 65):
        with pytest.raises(ConfigError, match=r"'inference.parallel_requests'"):
            parse_config({"inference": {"parallel_requests": slots}})
    with pytest.raises(ConfigError, match=r"'inference.max_output_tokens'"):
        parse_config({"inference": {"max_output_tokens": 0}})
    with pytest.raises(ConfigError, match=r"'model_store.staging.staging_keep_recent_gb'"):
        parse_config({"model_store": {"staging": {"staging_keep_recent_gb": -1}}})
    with pytest.raises(ConfigError, match=r"'cluster.fabric_port'"):
        parse_config({"cluster": {"fabric_port": "many"}})
    with pytest.raises(ConfigError, match=r"'node.memory_reserve_gb'"):
        parse_config({"node": {"memory_reserve_gb": -1}})
    assert parse_config({"node": {"memory_reserve_gb": 2.5}}).node.memory_reserve_gb == 2.5
    with pytest.raises(ConfigError, match=r"'node.memory_limit_gb'"):
        parse_config({"node": {"memory_limit_gb": 0}})
    assert parse_config({"node": {"memory_limit_gb": 4}}).node.memory_limit_gb == 4


def test_flash_attention_takes_a_switch_written_either_way() -> None:
    def switch(value: object) -> FlashAttention:
        return parse_config({"inference": {"flash_attention": value}}).inference.flash_attention

    assert SkulkConfig().inference.flash_attention is FlashAttention.AUTO
    assert switch("off") is FlashAttention.OFF
    # YAML reads a bare `on`/`off` as a boolean.
    assert switch(True) is FlashAttention.ON
    assert switch(False) is FlashAttention.OFF
    with pytest.raises(ConfigError, match=r"'inference.flash_attention'"):
        switch("sometimes")


def test_a_quantized_kv_cache_with_flash_attention_off_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'inference'.*q8_0 KV cache needs flash attention"):
        parse_config({"inference": {"kv_cache_backend": "q8_0", "flash_attention": "off"}})
    fine = parse_config({"inference": {"kv_cache_backend": "f16", "flash_attention": "off"}})

    def in_effect(inference: InferenceConfig, override: str | None) -> KvCacheBackend:
        return kv_cache_in_effect(inference, override, override_name="KV_ENV")

    assert in_effect(fine.inference, None) is KvCacheBackend.F16
    # The environment's override is held to the same rule, and to the known types.
    with pytest.raises(ConfigError, match=r"for KV_ENV: a q4_0 KV cache .* or unset KV_ENV"):
        in_effect(fine.inference, "q4_0")
    with pytest.raises(ConfigError, match="KV_ENV must be one of default, f16, q8_0, q4_0"):
        in_effect(fine.inference, "q5_1")
    on = parse_config({"inference": {"kv_cache_backend": "q4_0", "flash_attention": "on"}})
    assert in_effect(on.inference, " Q8_0 ") is KvCacheBackend.Q8_0
    assert in_effect(on.inference, "") is KvCacheBackend.Q4_0


def test_non_mapping_is_refused() -> None:
    with pytest.raises(ConfigError):
        parse_config(["a"])


def test_public_view_strips_secrets() -> None:
    config = parse_config({"hf_token": "hf_secret", "cluster": {"key": "psk-secret"}})
    view = public_view(config)
    assert "hf_token" not in view
    assert "key" not in view["cluster"]
    assert "secret" not in repr(view)


def test_put_preserves_omitted_sections_and_tokens() -> None:
    current = parse_config(
        {
            "hf_token": "hf_keep",
            "logging": {"level": "debug"},
            "model_trust": {"approved_remote_code_identities": ["x"]},
            "cluster": {"key": "psk"},
            "inference": {"kv_cache_backend": "q8_0"},
        }
    )
    incoming_doc = {"inference": {"kv_cache_backend": "f16"}}
    merged = merge_update(current, parse_config(incoming_doc), set(incoming_doc))
    assert merged.hf_token == "hf_keep"
    assert merged.logging.level is LogLevel.DEBUG
    assert merged.model_trust.approved_remote_code_identities == ("x",)
    assert merged.cluster.key == "psk"
    assert merged.inference.kv_cache_backend is KvCacheBackend.F16


def test_put_blank_token_never_erases_and_new_token_replaces() -> None:
    current = parse_config({"hf_token": "hf_keep"})
    blank = {"hf_token": "  "}
    assert merge_update(current, parse_config(blank), set(blank)).hf_token == "hf_keep"
    new = {"hf_token": "hf_new"}
    assert merge_update(current, parse_config(new), set(new)).hf_token == "hf_new"


def test_put_replaces_sections_it_does_not_preserve() -> None:
    current = parse_config({"inference": {"kv_cache_backend": "q8_0"}})
    merged = merge_update(current, parse_config({}), set())
    assert merged.inference.kv_cache_backend is KvCacheBackend.DEFAULT


def test_browser_tools_defaults_refuse_private_addresses() -> None:
    tools = parse_config({}).browser_tools
    assert tools.allow_private_addresses is False
    assert tools.search_provider is SearchProviderName.DUCKDUCKGO
    assert tools.search_url is None
    assert tools.timeout_seconds == 15.0


def test_browser_tools_values_are_checked_naming_the_key() -> None:
    config = parse_config(
        {
            "browser_tools": {
                "allow_private_addresses": True,
                "search_provider": "searxng",
                "search_url": "http://searx.lan:8888",
                "timeout_seconds": 5,
            }
        }
    )
    assert config.browser_tools.search_provider is SearchProviderName.SEARXNG
    assert config.browser_tools.timeout_seconds == 5.0
    with pytest.raises(ConfigError, match=r"'browser_tools.search_provider'"):
        parse_config({"browser_tools": {"search_provider": "altavista"}})
    with pytest.raises(ConfigError, match=r"'browser_tools.timeout_seconds'"):
        parse_config({"browser_tools": {"timeout_seconds": 0}})
    with pytest.raises(ConfigError, match=r"'browser_tools.timeout_seconds'"):
        parse_config({"browser_tools": {"timeout_seconds": MAX_BROWSER_TIMEOUT_SECONDS + 1}})
    assert parse_config(
        {"browser_tools": {"timeout_seconds": MAX_BROWSER_TIMEOUT_SECONDS}}
    ).browser_tools.timeout_seconds == (MAX_BROWSER_TIMEOUT_SECONDS)
    with pytest.raises(ConfigError, match=r"'browser_tools.allow_lan'"):
        parse_config({"browser_tools": {"allow_lan": True}})


def test_search_api_key_is_secret_and_kept_across_put() -> None:
    current = parse_config({"browser_tools": {"search_api_key": "sk-search-secret"}})
    view = public_view(current)
    assert "search_api_key" not in view["browser_tools"]
    assert "sk-search-secret" not in repr(view)
    incoming_doc = {"browser_tools": {"allow_private_addresses": True}}
    merged = merge_update(current, parse_config(incoming_doc), set(incoming_doc))
    assert merged.browser_tools.allow_private_addresses is True
    assert merged.browser_tools.search_api_key == "sk-search-secret"
    replaced = {"browser_tools": {"search_api_key": "sk-new"}}
    assert merge_update(current, parse_config(replaced), set(replaced)).browser_tools == (
        BrowserToolsConfig(search_api_key="sk-new")
    )


def test_search_api_key_is_dropped_when_search_url_points_elsewhere() -> None:
    current = parse_config(
        {
            "browser_tools": {
                "search_provider": "searxng",
                "search_url": "https://searx.example.org",
                "search_api_key": "sk-search-secret",
            }
        }
    )

    def put(browser_tools: dict[str, object]) -> BrowserToolsConfig:
        document = {"browser_tools": {"search_provider": "searxng", **browser_tools}}
        return merge_update(current, parse_config(document), set(document)).browser_tools

    # A new destination without a new key: the stored key does not follow it.
    assert put({"search_url": "https://collector.example"}).search_api_key is None
    assert put({}).search_api_key is None
    # The same destination (spelled with a trailing slash or blanks) keeps it.
    assert put({"search_url": "https://searx.example.org"}).search_api_key == "sk-search-secret"
    assert put({"search_url": " https://searx.example.org/ "}).search_api_key == (
        "sk-search-secret"
    )
    # A new destination with its own key keeps the key that came with it.
    moved = put({"search_url": "https://searx2.example.org", "search_api_key": "sk-new"})
    assert (moved.search_url, moved.search_api_key) == ("https://searx2.example.org", "sk-new")
