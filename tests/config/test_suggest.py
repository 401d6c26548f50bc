"""An unknown field's error names the allowed field nearest it, at the level it was written
(gateway/config/suggest.py), in config.yaml and in policy files, with its path and line."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.policy_set import PolicyProblem, validate_policy

HEAD = "providers:\n  d: {type: demo}\nmodels:\n  - {name: m, provider: d}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(HEAD + text, "config.yaml")
    return caught.value.problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cahce: {}\n", "cahce (line 5): Extra inputs are not permitted (did you mean 'cache'?)"),
        (
            "server:\n  prot: 80\n",
            "server.prot (line 6): Extra inputs are not permitted (did you mean 'port'?)",
        ),
        (  # inside a mapping of named entries
            "knowledge_bases:\n  docs:\n    min_scor: 0.3\n",
            "knowledge_bases.docs.min_scor (line 7): Extra inputs are not permitted (did you "
            "mean 'min_score'?)",
        ),
        (  # inside a list
            "routing:\n  aliases:\n    auto:\n      tiers:\n        - {model: m, max_scor: 1}\n",
            "routing.aliases.auto.tiers[0].max_scor (line 9): Extra inputs are not permitted "
            "(did you mean 'max_score'?)",
        ),
        (  # a field of a section nested in an optional one
            "responses:\n  store: {type: memory, max_entrys: 5}\n",
            "responses.store.max_entrys (line 6): Extra inputs are not permitted (did you mean "
            "'max_entries'?)",
        ),
        ("nothing_like_it: 1\n", "nothing_like_it (line 5): Extra inputs are not permitted"),
    ],
)
def test_config_yaml(text: str, expected: str) -> None:
    assert problems(text) == [expected]


def test_a_provider_field_is_suggested_among_a_providers_fields() -> None:
    text = (
        "providers:\n  d: {type: openai, base_ulr: 'http://x/v1'}\n"
        "models: [{name: m, provider: d}]\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert caught.value.problems == [
        "providers.d.base_ulr (line 2): Extra inputs are not permitted (did you mean 'base_url'?)"
    ]


FILE = parse_config(HEAD)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"match": {}, "cahce": {"enabled": True}},
            "cahce: not a policy field; did you mean 'cache'?",
        ),
        (
            {"match": {"tenant": ["a"]}},
            "match.tenant: Extra inputs are not permitted (did you mean 'tenants'?)",
        ),
        (
            {"match": {}, "guard": {"loops": {"max_round": 3}}},
            "guard.loops.max_round: Extra inputs are not permitted (did you mean 'max_rounds'?)",
        ),
    ],
)
def test_policy_files(data: dict[str, object], expected: str) -> None:
    with pytest.raises(PolicyProblem) as caught:
        validate_policy("p", "policies/p.yaml", data, FILE)
    assert str(caught.value).startswith(expected)
