"""The shipped example policies, the committed JSON Schemas, and the CLI around them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator, ValidationError

from gateway.config import load_settings
from gateway.config.json_schemas import SCHEMAS
from gateway.testing.harness.starters import run_gateway_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "policies" / "examples").glob("*.yaml"))
SCHEMA_DIR = ROOT / "schemas"


def _gateway(*args: str) -> subprocess.CompletedProcess[str]:
    return run_gateway_cli(*args)


def _with_policies(tmp_path: Path, examples: list[Path]) -> Path:
    """The shipped config.yaml in tmp_path with `examples` copied into its policies dir."""
    config = tmp_path / "config.yaml"
    shutil.copy(ROOT / "config.yaml", config)
    policies = tmp_path / "policies"
    policies.mkdir()
    for example in examples:
        shutil.copy(example, policies / example.name)
    return config


def _schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / name).read_text("utf-8"))


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text("utf-8"))


def test_there_are_examples() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"premium-tenants", "free-tier-routing", "bring-your-own-key"} <= names


def test_the_shipped_config_loads_no_example() -> None:
    """Examples sit in policies/examples/, a subdirectory: not loaded."""
    assert load_settings(ROOT / "config.yaml").policies.policies == ()


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_each_example_loads_alone(tmp_path: Path, example: Path) -> None:
    settings = load_settings(_with_policies(tmp_path, [example]))
    (policy,) = settings.policies.policies
    assert policy.name == example.stem
    assert policy.description  # every example says what it is for


def test_all_examples_load_together_without_a_tie(tmp_path: Path) -> None:
    settings = load_settings(_with_policies(tmp_path, EXAMPLES))
    assert [p.name for p in settings.policies.policies] == [p.stem for p in EXAMPLES]
    assert settings.policies.check() == []


def test_gateway_check_accepts_all_examples_and_counts_them(tmp_path: Path) -> None:
    config = _with_policies(tmp_path, EXAMPLES)
    result = _gateway("check", "--config", str(config))
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"{config}: OK (")
    assert first.endswith(f", {len(EXAMPLES)} policies)")


def test_gateway_policy_prints_the_resolution_as_json(tmp_path: Path) -> None:
    config = _with_policies(tmp_path, EXAMPLES)
    result = _gateway("policy", "--config", str(config), "--tenant", "acme", "--model", "gpt-4o")
    assert result.returncode == 0, result.stderr
    explained = json.loads(result.stdout)
    assert explained["tenant"] == "acme"
    assert explained["model"] == "gpt-4o"
    policies = explained["policies"]
    assert [p["name"] for p in policies] == ["premium-tenants", "agents", "overload"]
    assert [p["rank"] for p in policies] == [[2, 0], [0, 1], [0, 0]]
    assert policies[0]["why"] == "tenant 'acme' exactly, any model"
    assert policies[1]["why"] == "any tenant, model glob 'gpt-4o*'"
    assert policies[2]["why"] == "any tenant, any model"
    assert policies[0]["source"] == str(tmp_path / "policies" / "premium-tenants.yaml")
    origin = explained["origin"]
    assert origin["cache.enabled"] == "premium-tenants"
    assert origin["rate_limits.requests_per_second"] == "premium-tenants"
    assert origin["guard.loops.max_rounds"] == "agents"
    assert origin["overload.max_in_flight"] == "overload"
    assert list(origin) == sorted(origin)


def test_gateway_policy_at_the_tenant_level_and_for_an_unmatched_tenant(tmp_path: Path) -> None:
    config = _with_policies(tmp_path, EXAMPLES)
    result = _gateway("policy", "--config", str(config), "--tenant", "free-1")
    assert result.returncode == 0, result.stderr
    explained = json.loads(result.stdout)
    assert explained["model"] == ""
    # free-tier-routing narrows models to `auto`: not at the tenant level
    assert [p["name"] for p in explained["policies"]] == ["overload"]
    result = _gateway("policy", "--config", str(config), "--tenant", "free-1", "--model", "auto")
    names = [p["name"] for p in json.loads(result.stdout)["policies"]]
    assert names == ["free-tier-routing", "overload"]


def test_example_resolutions(tmp_path: Path) -> None:
    settings = load_settings(_with_policies(tmp_path, EXAMPLES))
    policies = settings.policies
    premium = policies.for_tenant("team-x")
    assert premium.rate_limits.requests_per_second == 50
    assert premium.metrics.per_tenant is True
    partner = policies.for_tenant("partner-1")
    assert partner.byok.enabled is True
    assert partner.byok.providers == ["openai"]
    free = policies.resolve("free-1", "auto")
    assert [t.model for t in free.routing.aliases["auto"].tiers] == ["gpt-4o-mini"]
    support = policies.resolve("support", "demo")
    assert support.knowledge_base.base == "handbook"
    assert support.degradation.unavailable.mode == "error"
    assert set(support.degradation.disclaimer) == {"en", "zh"}
    agents = policies.resolve("anyone", "gpt-4o-mini")
    assert agents.guard.compression.summarizer_model == "gpt-4o-mini"
    assert agents.overload.max_in_flight == 200


# --- the JSON Schemas ----------------------------------------------------------------------


def test_committed_schemas_are_what_gateway_schema_writes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _gateway("schema", "--out", str(out))
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(SCHEMAS) == ["config.schema.json", "policy.schema.json"]
    for name in written:
        assert (out / name).read_text("utf-8") == (SCHEMA_DIR / name).read_text("utf-8"), (
            f"schemas/{name} is stale: run `gateway schema`"
        )
    assert result.stdout.splitlines() == [f"wrote {out / name}" for name in SCHEMAS]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schemas_are_valid_draft_2020_12(name: str) -> None:
    schema = _schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_the_shipped_config_validates_against_its_schema() -> None:
    validator = Draft202012Validator(_schema("config.schema.json"))
    errors = [e.message for e in validator.iter_errors(_yaml(ROOT / "config.yaml"))]
    assert errors == []


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_each_example_validates_against_the_policy_schema(example: Path) -> None:
    validator = Draft202012Validator(_schema("policy.schema.json"))
    errors = [e.message for e in validator.iter_errors(_yaml(example))]
    assert errors == []


def test_config_points_editors_at_its_schema() -> None:
    first = (ROOT / "config.yaml").read_text("utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=schemas/config.schema.json"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_point_editors_at_the_policy_schema(example: Path) -> None:
    first = example.read_text("utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=../../schemas/policy.schema.json"
    target = (example.parent / first.split("$schema=")[1]).resolve()
    assert target == SCHEMA_DIR / "policy.schema.json"


@pytest.mark.parametrize(
    ("policy", "path"),
    [
        ({"cache": {"enabled": "maybe"}}, ["cache", "enabled"]),
        ({"cache": {"similarity_threshold": 1.5}}, ["cache", "similarity_threshold"]),
        ({"caches": {"enabled": True}}, []),  # unknown top-level field
        ({"match": {"tenants": []}}, ["match", "tenants"]),
        ({"match": {"model": ["x"]}}, ["match"]),
        ({"overload": {"skip": ["everything"]}}, ["overload", "skip", 0]),
        ({"guard": {"loops": {"max_rounds": "many"}}}, ["guard", "loops", "max_rounds"]),
        ({"byok": {"providers": "openai"}}, ["byok", "providers"]),
    ],
)
def test_bad_policies_fail_the_schema(policy: dict[str, Any], path: list[Any]) -> None:
    validator = Draft202012Validator(_schema("policy.schema.json"))
    errors = list(validator.iter_errors(policy))
    assert errors, policy
    # sections are optional (anyOf the section or null): the field's error is in the context
    paths = [list(e.absolute_path) for e in _all_errors(errors)]
    assert path in paths, paths


def _all_errors(errors: list[ValidationError]) -> list[ValidationError]:
    out = []
    for error in errors:
        out += [error, *_all_errors(list(error.context or []))]
    return out


def test_the_policy_schema_requires_nothing_inside_sections() -> None:
    """A policy writes only what it changes: a partial section is valid."""
    validator = Draft202012Validator(_schema("policy.schema.json"))
    partial = {
        "routing": {"aliases": {"auto": {"escalate": {"tools": 0}}}},
        "guard": {"tools": {"rules": {"pay": {"arguments": {"amount": {"minimum": 0}}}}}},
        "degradation": {"unavailable": {"mode": "error"}},
    }
    assert [e.message for e in validator.iter_errors(partial)] == []
    assert [e.message for e in validator.iter_errors({})] == []
