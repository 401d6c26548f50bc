"""Config files written from dicts read back as the same data."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.config import load_settings
from gateway.testing.harness.configs import dump_yaml, openai_provider, write_config
from gateway.util.merge import deep_merge


def test_awkward_strings_survive_the_round_trip() -> None:
    data = {"a": "key: value # not a comment", "b": 'it\'s "quoted"\nand two lines', "c": "yes"}
    assert yaml.safe_load(dump_yaml(data)) == data


def test_deep_merge_merges_mappings_and_replaces_the_rest() -> None:
    base = {"server": {"port": 1, "host": "h"}, "models": [1, 2], "keep": True}
    merged = deep_merge(base, {"server": {"port": 2}, "models": [3]})
    assert merged == {"server": {"port": 2, "host": "h"}, "models": [3], "keep": True}
    assert base["server"] == {"port": 1, "host": "h"}  # not changed in place


def test_a_written_config_and_policy_load_as_the_gateway_loads_them(tmp_path: Path) -> None:
    config = {
        "providers": {"fake": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": [{"name": "m: one", "provider": "fake"}],
    }
    policy = {"description": "a: colon", "match": {"tenants": ["team-*"]}}
    path = write_config(tmp_path, config, {"team-a": policy})
    assert (tmp_path / "policies" / "team-a.yaml").is_file()
    settings = load_settings(path)
    assert "m: one" in settings.routes
    assert [p.name for p in settings.policies.policies] == ["team-a"]


def test_an_openai_provider_names_its_timeouts() -> None:
    assert openai_provider("http://x/v1", (1, 5, 10), api_key_env="K") == {
        "type": "openai",
        "base_url": "http://x/v1",
        "api_key_env": "K",
        "timeouts": {"connect": 1, "read": 5, "total": 10},
    }
