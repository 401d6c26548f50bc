"""`verify` of the cache (gateway/config/cache.py, VerifyPolicy): set in cache.defaults and in
a model's `cache:`, merged field by field (the model's fields over the defaults', unset ones
falling through), and bad values refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.cache import VerifyPolicy
from gateway.config.file import ConfigFile
from gateway.config.loading import load_settings

BASE = """
providers: {d: {type: demo}}
"""


def config(text: str) -> ConfigFile:
    return parse_config(BASE + text)


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + text, "bad.yaml")
    return info.value.problems


def verify_of(parsed: ConfigFile, name: str) -> VerifyPolicy:
    model = next(m for m in parsed.models if m.name == name)
    return parsed.cache.policy_for(model.cache).verify


def test_unset_verification_is_off_with_the_documented_defaults() -> None:
    verify = verify_of(config("models: [{name: a, provider: d}]\n"), "a")
    assert verify == VerifyPolicy()
    assert verify.sample_rate == 0.0 and verify.max_error_rate == 0.05 and verify.adapt
    assert not verify.exact_hits


def test_defaults_then_model_field_by_field() -> None:
    parsed = config(
        "cache:\n"
        "  defaults: {enabled: true, verify: {sample_rate: 0.1, max_error_rate: 0.02}}\n"
        "models:\n"
        "  - {name: a, provider: d}\n"
        "  - {name: b, provider: d, cache: {verify: {sample_rate: 0.5, adapt: false}}}\n"
    )
    a, b = verify_of(parsed, "a"), verify_of(parsed, "b")
    assert (a.sample_rate, a.max_error_rate, a.adapt) == (0.1, 0.02, True)
    # b's own fields win, the defaults' max_error_rate falls through
    assert (b.sample_rate, b.max_error_rate, b.adapt) == (0.5, 0.02, False)
    assert b.max_per_minute == VerifyPolicy().max_per_minute


@pytest.mark.parametrize(
    ("verify", "field"),
    [
        ("{sample_rate: 1.5}", "sample_rate"),
        ("{sample_rate: -0.1}", "sample_rate"),
        ("{max_error_rate: 0}", "max_error_rate"),
        ("{max_error_rate: 0.9}", "max_error_rate"),
        ("{max_per_minute: 0}", "max_per_minute"),
        ("{sampel_rate: 0.1}", "sampel_rate"),
    ],
)
def test_bad_values_are_refused_naming_the_field(verify: str, field: str) -> None:
    for where in (
        f"cache: {{defaults: {{verify: {verify}}}}}\nmodels: [{{name: a, provider: d}}]\n",
        f"models: [{{name: a, provider: d, cache: {{verify: {verify}}}}}]\n",
    ):
        found = problems(where)
        assert any(field in problem and "verify" in problem for problem in found), found


def test_a_policy_file_overrides_one_field_for_its_tenants(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "auth:\n  keys: [{env: VERIFY_KEY, tenant: team-a}]\n"
        "providers: {d: {type: demo}}\n"
        "cache: {defaults: {enabled: true, verify: {sample_rate: 0.1, max_error_rate: 0.02}}}\n"
        "models: [{name: a, provider: d, cache: {verify: {adapt: false}}}]\n"
    )
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(
        "match: {tenants: [team-a]}\ncache: {verify: {sample_rate: 0.9}}\n"
    )
    settings = load_settings(tmp_path / "config.yaml")
    base = settings.routes["a"].cache
    verify = settings.policies.resolve("team-a", "a").cache_for(base).verify
    assert (verify.sample_rate, verify.max_error_rate, verify.adapt) == (0.9, 0.02, False)
    other = settings.policies.resolve("team-b", "a").cache_for(base).verify
    assert other.sample_rate == 0.1  # the policy's tenants only


def test_a_policy_file_with_a_bad_value_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "providers: {d: {type: demo}}\nmodels: [{name: a, provider: d}]\n"
    )
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text("cache: {verify: {sample_rate: 1.5}}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path / "config.yaml")
    assert any("sample_rate" in p for p in info.value.problems), info.value.problems
