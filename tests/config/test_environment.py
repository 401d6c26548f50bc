"""Every environment variable a config names and that is unset is listed with what it turns
off; the ones that refuse callers or leave a door open are the serious ones."""

from typing import Any

from pydantic import BaseModel

from gateway.config.environment import ENV_FIELDS, no_tenant_can_sign_in, unset_variables
from gateway.config.file import ConfigFile
from gateway.config.loading import parse_config
from gateway.config.policy_file import PolicyFile

CONFIG = """
providers:
  demo: {type: demo}
  openai: {type: openai, base_url: "http://127.0.0.1:1/v1", api_key_env: OPENAI_KEY}
  backup: {type: openai, base_url: "http://127.0.0.1:2/v1", api_key_env: BACKUP_KEY}
models:
  - {name: local, provider: demo}
  - {name: only-openai, provider: openai}
  - name: both
    deployments: [{provider: openai}, {provider: backup}]
auth:
  keys:
    - {env: KEY_TEAM_A, tenant: team-a}
    - {env: KEY_TEAM_B, tenant: team-b}
  admin_key_env: ADMIN_KEY
  metrics_key_env: METRICS_KEY
knowledge_bases:
  remote: {type: http, url: "http://127.0.0.1:3/search", api_key_env: KB_TOKEN}
"""
EVERY = {
    "OPENAI_KEY": "o",
    "BACKUP_KEY": "b",
    "KEY_TEAM_A": "a",
    "KEY_TEAM_B": "bb",
    "ADMIN_KEY": "ad",
    "METRICS_KEY": "m",
    "KB_TOKEN": "t",
}


def _unset(**environ: str) -> dict[str, Any]:
    file = parse_config(CONFIG)
    return {v.name: v for v in unset_variables(file, environ)}


def test_nothing_is_listed_when_every_variable_is_set() -> None:
    assert _unset(**EVERY) == {}


def test_each_unset_variable_is_named_with_its_field_and_what_it_turns_off() -> None:
    found = _unset()
    assert set(found) == set(EVERY)
    team_a = found["KEY_TEAM_A"]
    assert (team_a.where, team_a.serious) == ("auth.keys[0].env", True)
    assert "tenant 'team-a'" in team_a.effect and "401" in team_a.effect
    assert found["METRICS_KEY"].serious and "open" in found["METRICS_KEY"].effect
    assert found["KB_TOKEN"].serious and "'remote'" in found["KB_TOKEN"].effect
    assert not found["ADMIN_KEY"].serious and "admin API" in found["ADMIN_KEY"].effect
    openai = found["OPENAI_KEY"]
    assert (openai.where, openai.serious) == ("providers.openai.api_key_env", False)
    assert openai.effect == "provider 'openai' is disabled; not served: only-openai, both"
    assert found["KEY_TEAM_A"].describe().startswith("KEY_TEAM_A is not set (auth.keys[0].env): ")


def test_a_model_with_another_usable_deployment_is_not_called_lost() -> None:
    found = _unset(**{k: v for k, v in EVERY.items() if k != "OPENAI_KEY"})
    assert found["OPENAI_KEY"].effect == "provider 'openai' is disabled; not served: only-openai"


def test_an_empty_value_counts_as_unset_and_serious_ones_come_first() -> None:
    file = parse_config(CONFIG)
    listed = unset_variables(file, {**EVERY, "KEY_TEAM_B": "", "ADMIN_KEY": ""})
    assert [v.name for v in listed] == ["KEY_TEAM_B", "ADMIN_KEY"]


def test_no_tenant_can_sign_in_when_every_listed_key_is_unset() -> None:
    file = parse_config(CONFIG)
    assert no_tenant_can_sign_in(file, unset_variables(file, {}))
    assert not no_tenant_can_sign_in(file, unset_variables(file, {"KEY_TEAM_B": "x"}))
    anonymous = parse_config("providers: {d: {type: demo}}\nmodels: [{name: m, provider: d}]\n")
    assert not no_tenant_can_sign_in(anonymous, unset_variables(anonymous, {}))


def _env_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Paths of every field named `env` or `*_env`, in ENV_FIELDS' spelling."""
    found = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if name == "env" or name.endswith("_env"):
            found.add(path)
        found |= _nested(field.annotation, path)
    return found


def _nested(annotation: Any, path: str) -> set[str]:
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _env_fields(annotation, path + ".")
    if origin is dict:
        return _nested(args[1], path + ".*")
    if origin is list:
        return _nested(args[0], path + "[]")
    return set().union(*(_nested(a, path) for a in args)) if args else set()


def test_every_field_that_names_a_variable_is_checked() -> None:
    # A new `*_env` field fails here until environment.py says what its variable turns off.
    assert _env_fields(ConfigFile) == ENV_FIELDS
    assert _env_fields(PolicyFile) == set()  # policies name no variables (yet)
