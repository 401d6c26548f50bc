"""Gateway settings for tests in front of the fake upstream: a `fake` provider at its URL and a
few public models on it, built from dicts (`util.merge.deep_merge` lays a test's own sections
over them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config import Settings, build_settings, parse_config
from gateway.testing.harness.configs import Json, dump_yaml

FAKE_PROVIDER_KEY_ENV = "FAKE_PROVIDER_KEY"
FAKE_PROVIDER_KEY = "sk-fake-provider-secret-123"

# One attempt, no breaker trips, errors instead of level-4 answers: each test sees exactly what
# one upstream call did. tests/e2e/test_resilience.py covers the real defaults.
TEST_RESILIENCE: Json = {
    "resilience": {"retry": {"attempts": 1}, "breaker": {"failures": 1000}},
    "degradation": {"unavailable": {"mode": "error"}},
}


def fake_config(fake_url: str) -> Json:
    """The config the shared test gateway runs: the fake provider (base URL `fake_url`, ending
    in /v1), a demo provider, and chat and embedding models on each."""
    return {
        "server": {"max_body_bytes": 65536},
        "responses": {"store": {"type": "memory"}},  # test gateways share no file
        "providers": {
            "fake": {
                "type": "openai",
                "base_url": fake_url,
                "api_key_env": FAKE_PROVIDER_KEY_ENV,
                "headers": {"X-Provider-Extra": "from-config"},
                "timeouts": {"connect": 2, "read": 5, "total": 10},
            },
            "demo": {"type": "demo"},
        },
        "models": [
            {"name": "fake-model", "provider": "fake", "aliases": ["fake-alias"]},
            {"name": "mapped", "provider": "fake", "upstream_model": "upstream-name"},
            {"name": "fake-embedding", "provider": "fake", "kind": "embedding"},
            {"name": "demo", "provider": "demo"},
            {"name": "demo-embedding", "provider": "demo", "kind": "embedding"},
        ],
    }


def settings_for(
    fake_url: str,
    extra: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """`fake_config` with the test's top-level sections (`extra`) replacing its own, and
    TEST_RESILIENCE unless the test sets `resilience` itself."""
    extra = dict(extra or {})
    data: Json = {**fake_config(fake_url)}
    if "resilience" not in extra:
        data.update(TEST_RESILIENCE)
    data.update(extra)
    return settings_of(data, {FAKE_PROVIDER_KEY_ENV: FAKE_PROVIDER_KEY, **(environ or {})})


def settings_of(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from a config dict, validated as the gateway validates config.yaml (through
    its YAML text, so errors name lines), keys read from `environ` only."""
    return build_settings(parse_config(dump_yaml(config), "<test>"), "<test>", environ or {})
