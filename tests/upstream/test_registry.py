"""What a config reload keeps of the running providers (Upstreams.inherit): for a provider
configured the same, whether it has answered and its last health probe; for one configured
otherwise, nothing. Otherwise a reload during a provider's outage would turn its refused
connections into configuration faults (issue 34, item 1)."""

from __future__ import annotations

from gateway.config import Settings
from gateway.testing.harness.fake_settings import settings_of
from gateway.upstream import Upstreams
from gateway.upstream.health import ProviderHealth

KEY_ENV = "REGISTRY_TEST_KEY"


def _settings(base_url: str, key: str = "sk-registry-test-0001") -> Settings:
    config = {
        "providers": {
            "remote": {"type": "openai", "base_url": base_url, "api_key_env": KEY_ENV},
            "demo": {"type": "demo"},
        },
        "models": [{"name": "m", "provider": "remote"}, {"name": "d", "provider": "demo"}],
    }
    return settings_of(config, {KEY_ENV: key})


def _answered(upstreams: Upstreams) -> Upstreams:
    upstreams.get("remote").answered = True
    upstreams.health["remote"] = ProviderHealth("ok", 1.0)
    return upstreams


def test_a_provider_configured_the_same_keeps_what_was_learnt() -> None:
    running = _answered(Upstreams(_settings("http://127.0.0.1:9/v1")))
    reloaded = Upstreams(_settings("http://127.0.0.1:9/v1"))
    reloaded.inherit(running)
    assert reloaded.get("remote").answered
    assert reloaded.health["remote"].status == "ok"


def test_a_provider_configured_otherwise_starts_afresh() -> None:
    running = _answered(Upstreams(_settings("http://127.0.0.1:9/v1")))
    for changed in (
        _settings("http://127.0.0.1:10/v1"),
        _settings("http://127.0.0.1:9/v1", "sk-2"),
    ):
        reloaded = Upstreams(changed)
        reloaded.inherit(running)
        assert not reloaded.get("remote").answered
        assert reloaded.health["remote"].status == "unchecked"
