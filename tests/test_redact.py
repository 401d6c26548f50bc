"""redact.py: what /admin/config shows of the config: header values and URL credentials
replaced wherever they appear, everything else unchanged."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.observability.redact import REDACTED, redacted, without_credentials


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:pw@host:6379/0", "redis://<redacted>@host:6379/0"),
        ("rediss://user:pw@cache.internal:6380/1", "rediss://<redacted>@cache.internal:6380/1"),
        ("https://user:tok@host/v1", "https://<redacted>@host/v1"),
        ("https://tok@host/v1", "https://<redacted>@host/v1"),  # a token as the user name
        ("https://user:tok@host/v1?x=1#frag", "https://<redacted>@host/v1?x=1#frag"),
        ("http://u:p@127.0.0.1:8000", "http://<redacted>@127.0.0.1:8000"),
        # without credentials: unchanged, even with an @ elsewhere
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("https://host/v1?email=a@b.example", "https://host/v1?email=a@b.example"),
        ("https://host/users/@me", "https://host/users/@me"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        # not parseable as a URL: all of it
        ("http://[bad@host", REDACTED),
    ],
)
def test_without_credentials(url: str, expected: str) -> None:
    assert without_credentials(url) == expected


def test_header_values_are_redacted_wherever_headers_appear() -> None:
    dumped = {
        "providers": {
            "a": {"base_url": "https://a.example/v1", "headers": {"Authorization": "Bearer s1"}},
            "b": {"base_url": "https://b.example/v1", "headers": {}},
        },
        "knowledge_bases": {"kb": {"url": "https://kb.example", "headers": {"X-Key": "s2"}}},
        "headers": {"X-Top": "s3", "X-Other": "s4"},
        "deep": [{"inner": {"headers": {"X-Deep": "s5"}}}],
    }
    assert redacted(dumped) == {
        "providers": {
            "a": {"base_url": "https://a.example/v1", "headers": {"Authorization": REDACTED}},
            "b": {"base_url": "https://b.example/v1", "headers": {}},
        },
        "knowledge_bases": {"kb": {"url": "https://kb.example", "headers": {"X-Key": REDACTED}}},
        "headers": {"X-Top": REDACTED, "X-Other": REDACTED},
        "deep": [{"inner": {"headers": {"X-Deep": REDACTED}}}],
    }


def test_url_credentials_are_stripped_in_nested_dicts_and_lists() -> None:
    dumped = {
        "cache": {"store": {"url": "redis://:pw@host:6379/0"}},
        "resilience": {"breaker_storage": {"type": "redis", "url": "redis://:pw2@r:6379/1"}},
        "providers": [{"base_url": "https://user:tok@host/v1"}, {"base_url": "https://h/v1"}],
        "levels": [[{"url": "https://u:p@x.example/a"}]],
    }
    assert redacted(dumped) == {
        "cache": {"store": {"url": "redis://<redacted>@host:6379/0"}},
        "resilience": {"breaker_storage": {"type": "redis", "url": "redis://<redacted>@r:6379/1"}},
        "providers": [{"base_url": "https://<redacted>@host/v1"}, {"base_url": "https://h/v1"}],
        "levels": [[{"url": "https://<redacted>@x.example/a"}]],
    }


def test_everything_else_is_unchanged_and_the_input_is_not_modified() -> None:
    dumped: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 8080, "log_prompts": False},
        "models": [{"name": "a", "aliases": ["b", "c"], "pricing": None}],
        "text": "contact: ops@example.com",  # an @ but no ://
        "weights": {"tools": 0.5},
        "empty": {},
        "nothing": None,
        "headers_list": ["X-Not-A-Header-Map"],
        "headers": ["a", "b"],  # not a mapping: left as it is
    }
    before = copy.deepcopy(dumped)
    assert redacted(dumped) == before
    with_secrets = {"headers": {"X": "secret"}, "url": "https://u:secret@h/"}
    assert redacted(with_secrets) != with_secrets
    assert with_secrets == {"headers": {"X": "secret"}, "url": "https://u:secret@h/"}


def test_scalars_and_lists_at_the_top() -> None:
    assert redacted(3) == 3
    assert redacted(None) is None
    assert redacted([{"headers": {"a": "b"}}, 1]) == [{"headers": {"a": REDACTED}}, 1]


def test_a_real_config_dump_keeps_no_secret() -> None:
    text = """
providers:
  up:
    type: openai
    base_url: "https://user:provider-token@up.example/v1"
    api_key_env: UP_KEY
    headers: {X-Api-Key: header-secret}
cache:
  store: {type: memory}
resilience:
  breaker_storage: {type: memory, url: "redis://:redis-password@r.example:6379/0"}
rate_limits:
  storage: {type: redis}
redis: {url: "rediss://user:rl-password@r.example:6380/0"}
knowledge_bases:
  kb:
    type: http
    url: "https://kb-user:kb-token@kb.example/search"
    headers: {Authorization: "Bearer kb-header"}
models:
  - {name: a, provider: up}
"""
    dumped = parse_config(text).model_dump(mode="json")
    shown = repr(redacted(dumped))
    for secret in (
        "provider-token",
        "header-secret",
        "redis-password",
        "rl-password",
        "kb-token",
        "kb-header",
        "kb-user",
    ):
        assert secret in repr(dumped)
        assert secret not in shown, secret
    assert "UP_KEY" in shown  # names of environment variables are not secrets
    assert "up.example" in shown and "r.example:6379" in shown


# --- regressions: bugs found by these tests, fixed in redact.py ----------------------


def test_fixed_url_credentials_in_a_list_of_strings_are_stripped() -> None:
    """Was a bug (redact.py, redacted): list items go through redacted(), which returns
    strings as they are; only dict values reach the URL check in _redact_field. A URL with
    credentials directly inside a list is shown in full. (No config field holds a list of URLs
    today, but the module promises "wherever they appear".)"""
    assert redacted({"urls": ["redis://:pw@host:6379/0"]}) == {
        "urls": ["redis://<redacted>@host:6379/0"]
    }


@pytest.mark.parametrize(
    "url",
    ["https://user:tok@host:99999/v1", "redis://:pw@host:port/0"],
)
def test_fixed_url_with_credentials_and_a_bad_port_does_not_raise(url: str) -> None:
    """Was a bug (redact.py, without_credentials): only urlsplit() is inside the try;
    `parts.port` raises ValueError for a port out of range or not a number. Config validation
    only checks the scheme of base_url / storage urls, so such a URL loads, and redacting the
    config for /admin/config raises instead of hiding the credentials."""
    shown = without_credentials(url)
    assert "tok" not in shown
    assert "pw" not in shown


def test_fixed_ipv6_host_keeps_its_brackets() -> None:
    """Was a bug (redact.py, without_credentials): the netloc is rebuilt from
    parts.hostname, which drops the brackets of an IPv6 literal: the shown URL becomes
    "redis://<redacted>@::1:6379/0", which no longer says where the port starts."""
    assert without_credentials("redis://:pw@[::1]:6379/0") == "redis://<redacted>@[::1]:6379/0"
