"""Which listen addresses other machines reach, and when a config without keys is refused
there. (`gateway serve` and a reload on such an address: tests/deploy/test_safe_start.py.)"""

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.auth import AuthConfig
from gateway.server.exposure import open_to_anyone, reaches_other_machines


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "::ffff:127.0.0.1"])
def test_loopback_is_this_machine_only(host: str) -> None:
    assert not reaches_other_machines(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.1", "10.0.0.5", "fe80::1%1"])
def test_wildcards_and_other_addresses_reach_other_machines(host: str) -> None:
    assert reaches_other_machines(host)


def test_a_name_that_does_not_resolve_is_left_to_the_listen_error() -> None:
    assert not reaches_other_machines("no-such-host.invalid")


def test_no_keys_on_a_public_address_is_refused_with_the_fixes() -> None:
    problem = open_to_anyone(AuthConfig(), "0.0.0.0")
    assert problem is not None and "\n" not in problem
    assert "refusing to serve 0.0.0.0 without keys" in problem and "tenant 'local'" in problem
    for fix in ("auth.keys", "auth.anonymous: true", "127.0.0.1"):
        assert fix in problem
    assert "every address" in (open_to_anyone(AuthConfig(), "") or "")


def test_keys_or_an_explicit_anonymous_are_accepted() -> None:
    assert open_to_anyone(AuthConfig(anonymous=True), "0.0.0.0") is None
    keyed = AuthConfig.model_validate({"keys": [{"env": "K", "tenant": "t"}]})
    assert open_to_anyone(keyed, "0.0.0.0") is None


def test_anonymous_with_keys_is_a_contradiction_named_at_its_line() -> None:
    text = (
        "providers: {d: {type: demo}}\nmodels: [{name: m, provider: d}]\n"
        "auth:\n  anonymous: true\n  keys: [{env: K, tenant: t}]\n"
    )
    with pytest.raises(ConfigError) as refused:
        parse_config(text)
    [problem] = refused.value.problems
    assert problem.startswith("auth.anonymous (line 4): true lets callers in without a key")
