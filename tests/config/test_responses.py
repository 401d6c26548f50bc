"""The `responses:` section (gateway/config/responses.py): its defaults, its place in the one
Redis of `redis:`, and bad values refused with the field named."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, RedisTarget, parse_config
from gateway.config.file import ConfigFile
from gateway.config.responses import Quota

BASE = """
providers: {d: {type: demo}}
models: [{name: a, provider: d}]
"""


def config(text: str = "") -> ConfigFile:
    return parse_config(BASE + text)


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + text, "bad.yaml")
    return info.value.problems


def test_the_defaults_keep_responses_30_days_in_an_sqlite_file() -> None:
    responses = config().responses
    assert responses.ttl_seconds == 30 * 86_400
    assert responses.store.type == "sqlite"
    assert responses.store.path == "data/responses.sqlite3"
    assert config().shared_redis().target("responses") is None


def test_stored_responses_are_bounded_by_default() -> None:
    """Issue 32: a tenant's share, one response's size and the whole store, all bounded
    without a line of config."""
    responses = config().responses
    assert responses.store.max_entries == 100_000
    assert responses.store.max_bytes == 2048 * 1024 * 1024
    assert responses.max_response_bytes == 8 * 1024 * 1024
    assert responses.quotas.for_tenant("anyone") == Quota(10_000, 256 * 1024 * 1024)


def test_a_tenant_can_have_its_own_storage_quota() -> None:
    quotas = config(
        "responses: {quotas: {default: {max_responses: 5, max_bytes: 4096},"
        " tenants: {big: {max_responses: null, max_bytes: 1048576}}}}\n"
    ).responses.quotas
    assert quotas.for_tenant("small") == Quota(5, 4096)
    assert quotas.for_tenant("big") == Quota(None, 1_048_576)


def test_a_redis_store_takes_the_defaults_without_complaint() -> None:
    assert config("responses: {store: {type: redis}}\n").responses.store.type == "redis"


def test_a_redis_store_shares_the_one_redis_under_its_own_prefix() -> None:
    shared = config(
        "responses: {store: {type: redis}}\nredis: {url: 'redis://r:6380/1', namespace: prod}\n"
    ).shared_redis()
    assert shared.target("responses") == RedisTarget("redis://r:6380/1", "prod:responses")
    assert config("responses: {store: {type: redis}}\n").shared_redis().target(
        "responses"
    ) == RedisTarget("redis://127.0.0.1:6379/0", "gateway:responses")


@pytest.mark.parametrize("ttl", ["0", "-5", "59", "1.5", "forever", "400000000"])
def test_a_bad_ttl_is_refused_naming_the_field(ttl: str) -> None:
    (problem,) = problems(f"responses: {{ttl_seconds: {ttl}}}\n")
    assert "responses.ttl_seconds" in problem


def test_a_count_bound_on_redis_is_refused_rather_than_ignored() -> None:
    (problem,) = problems("responses: {store: {type: redis, max_entries: 10}}\n")
    assert "responses.store" in problem and "max_entries" in problem


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("responses: {store: {type: postgres}}\n", "responses.store.type"),
        ("responses: {store: {max_entries: 0}}\n", "responses.store.max_entries"),
        ("responses: {ttl: 60}\n", "responses.ttl"),
        ("responses: {max_response_bytes: 10}\n", "responses.max_response_bytes"),
        ("responses: {quotas: {default: {max_bytes: 0}}}\n", "responses.quotas.default"),
        ("responses: {quotas: {default: {max_responses: 0}}}\n", "responses.quotas.default"),
    ],
)
def test_other_bad_fields_are_named(text: str, field: str) -> None:
    (problem,) = problems(text)
    assert field in problem
