"""The `redis:` section (gateway/config/redis.py): one server and one prefix for every part that
shares state, and the per-part `url` / `namespace` of before, accepted with a warning while they
agree and refused, naming the new setting, when they do not."""

from __future__ import annotations

import logging

import pytest
import yaml

from gateway.config import ConfigError, RedisTarget, parse_config

BASE = """
providers: {d: {type: demo}}
models: [{name: a, provider: d}]
"""
ALL_SHARED = """
cache: {store: {type: redis}}
resilience: {breaker_storage: {type: redis}}
rate_limits: {storage: {type: redis}}
"""


def targets(text: str) -> dict[str, RedisTarget]:
    return dict(parse_config(BASE + text).shared_redis().targets)


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + text, "bad.yaml")
    return info.value.problems


def test_one_url_and_namespace_serve_every_sharing_part() -> None:
    found = targets(ALL_SHARED + "redis: {url: 'redis://r.example:6380/2', namespace: prod}\n")
    assert found == {
        "cache": RedisTarget("redis://r.example:6380/2", "prod:cache"),
        "breakers": RedisTarget("redis://r.example:6380/2", "prod"),
        "rate_limits": RedisTarget("redis://r.example:6380/2", "prod"),
    }


def test_the_defaults_keep_the_keys_where_they_were() -> None:
    """Before the section each part had its own default: the cache `gateway:cache`, the others
    `gateway`, all on 127.0.0.1:6379/0. A deployment upgrading finds its keys again."""
    found = targets(ALL_SHARED)
    assert found["cache"] == RedisTarget("redis://127.0.0.1:6379/0", "gateway:cache")
    assert (
        found["breakers"]
        == found["rate_limits"]
        == RedisTarget("redis://127.0.0.1:6379/0", "gateway")
    )


def test_parts_that_do_not_share_get_no_target() -> None:
    assert targets("rate_limits: {storage: {type: redis}}\n").keys() == {"rate_limits"}
    assert targets("") == {}


def test_the_old_per_part_fields_are_accepted_with_a_warning_naming_the_new_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "gateway.config")
    url = "redis://:pw@old.example:6379/1"
    old = {
        "cache": {"store": {"type": "redis", "url": url, "namespace": "legacy:cache"}},
        "resilience": {"breaker_storage": {"type": "redis", "url": url, "namespace": "legacy"}},
        "rate_limits": {"storage": {"type": "redis", "url": url}},
    }
    found = targets(yaml.safe_dump(old))
    assert found == {
        "cache": RedisTarget(url, "legacy:cache"),
        "breakers": RedisTarget(url, "legacy"),
        "rate_limits": RedisTarget(url, "gateway"),
    }
    warned = [r.getMessage() for r in caplog.records]
    for moved in (
        "cache.store.url is deprecated: set redis.url",
        "cache.store.namespace is deprecated: set redis.namespace",
        "resilience.breaker_storage.url is deprecated: set redis.url",
        "resilience.breaker_storage.namespace is deprecated: set redis.namespace",
        "rate_limits.storage.url is deprecated: set redis.url",
    ):
        assert any(moved in line for line in warned), (moved, warned)
    assert len(warned) == 5
    assert not any("pw" in line for line in warned), "a URL may carry a password"


def test_an_old_namespace_is_honoured_as_it_was_written() -> None:
    """The same namespace for every part was common: the cache's keys stay under it (not under
    `<namespace>:cache`), so a running deployment keeps its cache."""
    found = targets(
        """
cache: {store: {type: redis, namespace: shared}}
rate_limits: {storage: {type: redis, namespace: shared}}
"""
    )
    assert found["cache"].namespace == found["rate_limits"].namespace == "shared"


def test_old_fields_that_agree_with_the_new_section_are_accepted() -> None:
    found = targets(
        """
redis: {url: "redis://r:6379/0", namespace: prod}
cache: {store: {type: redis, url: "redis://r:6379/0", namespace: "prod:cache"}}
resilience: {breaker_storage: {type: redis, namespace: prod}}
"""
    )
    assert found["cache"] == RedisTarget("redis://r:6379/0", "prod:cache")
    assert found["breakers"] == RedisTarget("redis://r:6379/0", "prod")


def test_two_servers_are_refused_naming_redis_url() -> None:
    (problem,) = problems(
        """
cache: {store: {type: redis, url: "redis://a:6379/0"}}
rate_limits: {storage: {type: redis, url: "redis://:secret@b:6379/0"}}
"""
    )
    assert "cache.store.url and rate_limits.storage.url name different servers" in problem
    assert "set once as redis.url" in problem
    assert "secret" not in problem


def test_an_old_url_that_contradicts_redis_url_is_refused() -> None:
    (problem,) = problems(
        """
redis: {url: "redis://a:6379/0"}
resilience: {breaker_storage: {type: redis, url: "redis://a:6379/1"}}
"""
    )
    assert "redis.url and resilience.breaker_storage.url name different servers" in problem


def test_an_old_namespace_that_contradicts_redis_namespace_is_refused() -> None:
    (problem,) = problems(
        """
redis: {namespace: prod}
cache: {store: {type: redis, namespace: prod}}
"""
    )
    assert "cache.store.namespace 'prod' disagrees with redis.namespace 'prod'" in problem
    assert "under 'prod:cache'" in problem
    assert "keep redis.namespace only" in problem


def test_old_fields_of_parts_that_do_not_share_are_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """They were ignored before too; only a part that uses Redis can contradict another."""
    caplog.set_level(logging.WARNING, "gateway.config")
    found = targets(
        """
redis: {url: "redis://a:6379/0"}
rate_limits: {storage: {type: memory, url: "redis://elsewhere:6379/0"}}
resilience: {breaker_storage: {type: redis}}
"""
    )
    assert found == {"breakers": RedisTarget("redis://a:6379/0", "gateway")}
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "rate_limits.storage.url is deprecated (ignored here: this part does not use Redis)" in (
        warning
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("redis: {url: 'http://r:6379'}\n", "redis.url (line 4)"),
        ("cache: {store: {type: redis, url: 'http://r:6379'}}\n", "cache.store (line 4)"),
        ("redis: {namespace: ''}\n", "redis.namespace (line 4)"),
        ("redis: {host: r}\n", "redis.host (line 4)"),
    ],
)
def test_bad_values_name_their_field(text: str, where: str) -> None:
    (problem,) = problems(text)
    assert problem.startswith(where), problem
