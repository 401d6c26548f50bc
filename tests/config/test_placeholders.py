"""A secret that holds a placeholder (`replace-me`, `sk-...`) is refused when the config loads:
named by its variable and field with the fix, never by its value; real keys and the short test
keys of this suite pass."""

import random
import re
import secrets
import string

import pytest

from gateway.config import build_settings, parse_config
from gateway.config.environment import ENV_FIELDS, named_variables, placeholder_problems
from gateway.config.placeholders import placeholder

PLACEHOLDERS = [
    "replace-me",
    "REPLACE_ME",
    "Change Me",
    "changeme",
    "change-it",
    "TODO",
    "fixme",
    "placeholder",
    "dummy",
    "secret",
    "api_key",
    "null",
    "undefined",
    "your-api-key",
    "YOUR_OPENAI_API_KEY",
    "my-secret-token",
    "insert_token_here",
    "replace-with-your-key",
    "key-goes-here",
    "<your key>",
    "<no value>",
    "${OPENAI_API_KEY}",
    "$OPENAI_API_KEY",
    "{{ .Values.openaiKey }}",
    "%API_KEY%",
    "sk-...",
    "sk-proj-...Ab3x",
    "sk-\u2026",
    "xxx",
    "****",
    "00000000",
    "sk-xxxxxxxxxxxxxxxx",
    "sk-proj-XXXX-XXXX-XXXX",
    "gsk_aaaaaaaa",
    "AKIAXXXXXXXXXXXXXXXX",
    "sk-abc123********",
    "sk-",
    "   ",
    "\t\n",
]
REAL = [
    "sk-proj-Ab3xYz9QwErTyUiOp4s5D6f7G8h9J0kL",
    "sk-ant-api03-Qm9vZ2xlIHNheXMgaGk",
    "gsk_8fKq2LmNpR7sT1vW3xYz5A6bC9dE0fGh",
    "0123456789abcdef0123456789abcdef",
    "a3f1c9e27b5d4086",
    # keys this test suite uses
    "k",
    "key-a",
    "sk-1",
    "bb",
    "sk-fake",
    "sk-very-secret",
    "admin-secret-for-tests",
    "root",
    "gw-key-a",
    "my-team",
    "change-management-key",
]


@pytest.mark.parametrize("value", PLACEHOLDERS)
def test_placeholders_are_recognised(value: str) -> None:
    assert placeholder(value) is not None


@pytest.mark.parametrize("value", REAL)
def test_real_and_test_keys_are_not_placeholders(value: str) -> None:
    assert placeholder(value) is None


def test_an_empty_value_is_unset_not_a_placeholder() -> None:
    # compose passes ${OPENAI_API_KEY:-} as "": the provider is disabled, as before
    assert placeholder("") is None


def test_random_keys_of_every_usual_shape_are_never_placeholders() -> None:
    rng = random.Random(34)
    alphabet = string.ascii_letters + string.digits
    for _ in range(4_000):
        n = rng.randint(16, 64)
        body = "".join(rng.choice(alphabet) for _ in range(n))
        for value in (body, "sk-" + body, "sk-proj-" + secrets.token_urlsafe(n), body[:32]):
            assert placeholder(value) is None, value


CONFIG = """
providers:
  demo: {type: demo}
  openai: {type: openai, base_url: "http://127.0.0.1:1/v1", api_key_env: PH_OPENAI}
models:
  - {name: local, provider: demo}
  - {name: gpt, provider: openai}
auth:
  keys: [{env: PH_TEAM_A, tenant: team-a}]
  admin_key_env: PH_ADMIN
  metrics_key_env: PH_METRICS
knowledge_bases:
  remote: {type: http, url: "http://127.0.0.1:3/search", api_key_env: PH_KB}
"""
GOOD = {
    "PH_OPENAI": "sk-proj-Ab3xYz9QwErTyUiOp4s5D6f7",
    "PH_TEAM_A": "a3f1c9e27b5d4086a3f1",
    "PH_ADMIN": "9d8c7b6a5f4e3d2c1b0a",
    "PH_METRICS": "m-5f4e3d2c1b0a9d8c7b",
    "PH_KB": "kb-1b0a9d8c7b6a5f4e",
}


def test_every_field_that_names_a_variable_is_checked_for_placeholders() -> None:
    fields = {
        re.sub(r"\[\d+\]", "[]", where) for _, where, _ in named_variables(parse_config(CONFIG))
    }
    assert {re.sub(r"\.(openai|remote)\.", ".*.", f) for f in fields} == ENV_FIELDS


@pytest.mark.parametrize(
    ("variable", "where", "fix"),
    [
        ("PH_OPENAI", "providers.openai.api_key_env", "or unset it to disable the provider"),
        ("PH_TEAM_A", "auth.keys[0].env", "the key of tenant 'team-a'"),
        ("PH_ADMIN", "auth.admin_key_env", "or unset it to turn the admin API off"),
        ("PH_METRICS", "auth.metrics_key_env", "give it to Prometheus"),
        ("PH_KB", "knowledge_bases.remote.api_key_env", "the retriever's token"),
    ],
)
def test_a_placeholder_in_any_secret_refuses_the_config_naming_it_not_its_value(
    variable: str, where: str, fix: str
) -> None:
    value = "REPLACE_ME_PLEASE" if variable != "PH_ADMIN" else "<admin key here>"
    with pytest.raises(ValueError) as refused:
        build_settings(parse_config(CONFIG), "config.yaml", {**GOOD, variable: value})
    message = str(refused.value)
    assert message.splitlines() == [message]  # one line
    assert message.startswith(f"{variable} ({where}) holds a placeholder (")
    assert fix in message
    assert value not in message and "REPLACE" not in message


def test_each_placeholder_is_its_own_line() -> None:
    shipped = {
        **GOOD,
        "PH_OPENAI": "replace-me",
        "PH_TEAM_A": "replace-me",
        "PH_ADMIN": "replace-me",
    }
    with pytest.raises(ValueError) as refused:
        build_settings(parse_config(CONFIG), "config.yaml", shipped)
    # Placeholders come first: the same "replace-me" thrice is not reported as shared keys.
    lines = str(refused.value).splitlines()
    assert [line.split()[0] for line in lines] == ["PH_OPENAI", "PH_TEAM_A", "PH_ADMIN"]


def test_real_values_load() -> None:
    settings = build_settings(parse_config(CONFIG), "config.yaml", GOOD)
    assert settings.providers["openai"].disabled_reason is None


def test_a_placeholder_password_in_the_redis_url_is_refused() -> None:
    shared = (
        CONFIG + "redis: {url: 'redis://:changeme@redis:6379/0'}\ncache: {store: {type: redis}}\n"
    )
    problems = placeholder_problems(parse_config(shared), GOOD)
    assert len(problems) == 1 and problems[0].startswith("redis.url: the password in it")
    assert "changeme" not in problems[0]
    real = shared.replace("changeme", "Xk29fLq0Pz7")
    assert placeholder_problems(parse_config(real), GOOD) == []
    # a URL no part uses is not checked: nothing sends it
    unused = CONFIG + "redis: {url: 'redis://:changeme@redis:6379/0'}\n"
    assert placeholder_problems(parse_config(unused), GOOD) == []
