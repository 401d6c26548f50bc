"""Precedence of policies/*.yaml (gateway/config/policy_set.py): several policy files loaded from a
temporary directory beside a minimal config.yaml, and what each (tenant, model) resolves to.

Ranks are (tenant specificity, model specificity): 2 exact, 1 glob, 0 `*`. The fixture's policies:

    any          (*,       *)     cache enabled=false ttl=100 max_temperature=0.5; overload 100
    team-glob    (team-*,  *)     cache enabled=true ttl=200; metrics.per_tenant
    team-a       (team-a,  *)     cache ttl=300
    team-multi   (team-*|team-c, *)  overload.skip [retrieval]
    team-small   (team-*,  s*)    cache semantic=false
    acme         (acme,    *)     guard.loops.max_rounds 50; rate_limits.concurrent 9
    big-glob     (*,       b*)    degradation.unavailable.mode error
    big          (*,       big)   cache enabled=false ttl=400 similarity_threshold=0.99
    free         (free-*,  auto)  routing: auto has one tier
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.config import CachePolicy, Settings, load_settings
from gateway.config.policy_set import CONFIG_FILE, PolicySet, Resolved, specificity

CONFIG = """
auth:
  keys:
    - {env: KEY_ACME, tenant: acme}
    - {env: KEY_TEAM_A, tenant: team-a}
    - {env: KEY_TEAM_B, tenant: team-b}
    - {env: KEY_OTHER, tenant: other}
providers:
  openai: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: FAKE_OPENAI_KEY}
cache:
  defaults: {enabled: false, ttl_seconds: 86400}
degradation:
  unavailable: {mode: answer, retry_after_seconds: 7}
guard:
  loops: {max_rounds: 12}
rate_limits:
  default: {requests_per_second: 5}
  tenants:
    acme: {concurrent: 3}
    team-a: {requests_per_second: 20, burst: 40}
routing:
  aliases:
    auto:
      tiers: [{model: small, max_score: 0.5}, {model: big}]
models:
  - {name: small, provider: openai, aliases: [s]}
  - name: big
    provider: openai
    cache: {enabled: true, similarity_threshold: 0.9, ttl_seconds: 60}
  - {name: emb, provider: openai, kind: embedding}
"""

POLICIES = {
    "any": """
        match: {tenants: ["*"], models: ["*"]}
        cache: {enabled: false, ttl_seconds: 100, max_temperature: 0.5}
        overload: {max_in_flight: 100}
    """,
    "team-glob": """
        match: {tenants: ["team-*"]}
        cache: {enabled: true, ttl_seconds: 200}
        metrics: {per_tenant: true}
    """,
    "team-a": """
        match: {tenants: [team-a]}
        cache: {ttl_seconds: 300}
    """,
    "team-multi": """
        match: {tenants: ["team-*", team-c]}
        overload: {skip: [retrieval]}
    """,
    "team-small": """
        match: {tenants: ["team-*"], models: ["s*"]}
        cache: {semantic: false}
    """,
    "acme": """
        match: {tenants: [acme]}
        guard: {loops: {max_rounds: 50}}
        rate_limits: {concurrent: 9}
    """,
    "big-glob": """
        match: {models: ["b*"]}
        degradation: {unavailable: {mode: error}}
    """,
    "big": """
        match: {models: [big]}
        cache: {enabled: false, ttl_seconds: 400, similarity_threshold: 0.99}
    """,
    "free": """
        match: {tenants: ["free-*"], models: [auto]}
        routing:
          aliases:
            auto:
              tiers: [{model: small}]
    """,
}


def write_config(root: Path, policies: dict[str, str], config: str = CONFIG) -> Path:
    (root / "policies").mkdir(parents=True, exist_ok=True)
    path = root / "config.yaml"
    path.write_text(textwrap.dedent(config), "utf-8")
    for name, text in policies.items():
        (root / "policies" / f"{name}.yaml").write_text(textwrap.dedent(text), "utf-8")
    return path


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(write_config(tmp_path, POLICIES))


def _names(resolved: Resolved) -> list[str]:
    return [a.policy.name for a in resolved.applied]


def _cache(resolved: Resolved) -> dict[str, Any]:
    return resolved.cache.model_dump(exclude_none=True)


def _cache_origin(resolved: Resolved) -> dict[str, str]:
    return {k: v for k, v in resolved.origin.items() if k.startswith("cache.")}


# --- specificity ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("*", "acme", 0),
        ("*", "", 0),
        ("team-*", "team-a", 1),
        ("team-?", "team-a", 1),
        ("team-[ab]", "team-b", 1),
        ("team-a", "team-a", 2),
        ("team-a", "team-b", None),
        ("team-*", "acme", None),
        ("team-*", "", None),
        ("big", "", None),
        ("Acme", "acme", None),  # names are case-sensitive
    ],
)
def test_specificity_scores_exact_glob_and_star(pattern: str, name: str, expected: int) -> None:
    assert specificity(pattern, name) == expected


# --- which policies apply, in which order --------------------------------------------------

# (tenant, model) -> the policies that apply, least specific first (the last one wins).
APPLIED = [
    ("other", "small", ["any"]),
    ("other", "big", ["any", "big-glob", "big"]),
    ("team-b", "small", ["any", "team-glob", "team-multi", "team-small"]),
    ("team-b", "s", ["any", "team-glob", "team-multi", "team-small"]),  # an alias
    ("team-a", "small", ["any", "team-glob", "team-multi", "team-small", "team-a"]),
    ("team-a", "big", ["any", "big-glob", "big", "team-glob", "team-multi", "team-a"]),
    ("team-c", "emb", ["any", "team-glob", "team-multi"]),
    ("acme", "big", ["any", "big-glob", "big", "acme"]),
    ("acme", "auto", ["any", "acme"]),
    ("nobody", "unknown-model", ["any"]),
    # model "": what depends on the tenant only: no policy that narrows models
    ("team-a", "", ["any", "team-glob", "team-multi", "team-a"]),
    ("acme", "", ["any", "acme"]),
    ("other", "", ["any"]),
]


@pytest.mark.parametrize(("tenant", "model", "expected"), APPLIED)
def test_policies_apply_least_specific_first(
    settings: Settings, tenant: str, model: str, expected: list[str]
) -> None:
    resolved = settings.policies.resolve(tenant, model)
    assert _names(resolved) == expected
    ranks = [a.rank for a in resolved.applied]
    assert ranks == sorted(ranks)


@pytest.mark.parametrize(
    ("tenant", "model", "ranks"),
    [
        (
            "team-a",
            "big",
            {
                "any": (0, 0),
                "big-glob": (0, 1),
                "big": (0, 2),
                "team-glob": (1, 0),
                "team-multi": (1, 0),
                "team-a": (2, 0),
            },
        ),
        # the best pattern of a policy decides its rank: team-c is listed exactly
        (
            "team-c",
            "small",
            {"any": (0, 0), "team-multi": (2, 0), "team-glob": (1, 0), "team-small": (1, 1)},
        ),
        (
            "team-b",
            "small",
            {"any": (0, 0), "team-glob": (1, 0), "team-multi": (1, 0), "team-small": (1, 1)},
        ),
    ],
)
def test_rank_is_tenant_then_model_specificity(
    settings: Settings, tenant: str, model: str, ranks: dict[str, tuple[int, int]]
) -> None:
    resolved = settings.policies.resolve(tenant, model)
    assert {a.policy.name: a.rank for a in resolved.applied} == ranks


# --- what wins each field --------------------------------------------------------------------

# (tenant, model) -> the cache overrides in effect and which policy set each of them.
CACHE = [
    (
        "other",
        "small",
        {"enabled": False, "ttl_seconds": 100, "max_temperature": 0.5},
        {"enabled": "any", "ttl_seconds": "any", "max_temperature": "any"},
    ),
    (  # glob tenant beats '*'; fields set by different policies compose
        "team-b",
        "small",
        {"enabled": True, "ttl_seconds": 200, "max_temperature": 0.5, "semantic": False},
        {
            "enabled": "team-glob",
            "ttl_seconds": "team-glob",
            "max_temperature": "any",
            "semantic": "team-small",
        },
    ),
    (  # exact tenant beats glob tenant (ttl), glob+glob (semantic) still applies where unset
        "team-a",
        "small",
        {"enabled": True, "ttl_seconds": 300, "max_temperature": 0.5, "semantic": False},
        {
            "enabled": "team-glob",
            "ttl_seconds": "team-a",
            "max_temperature": "any",
            "semantic": "team-small",
        },
    ),
    (  # model exact beats model glob and '*' when the tenant side is '*' for all
        "other",
        "big",
        {
            "enabled": False,
            "ttl_seconds": 400,
            "max_temperature": 0.5,
            "similarity_threshold": 0.99,
        },
        {
            "enabled": "big",
            "ttl_seconds": "big",
            "max_temperature": "any",
            "similarity_threshold": "big",
        },
    ),
    (  # tenant specificity outranks model specificity: (team-*, *) beats (*, big) on enabled,
        # (team-a, *) beats (*, big) on ttl; big still sets what no tenant policy sets
        "team-a",
        "big",
        {"enabled": True, "ttl_seconds": 300, "max_temperature": 0.5, "similarity_threshold": 0.99},
        {
            "enabled": "team-glob",
            "ttl_seconds": "team-a",
            "max_temperature": "any",
            "similarity_threshold": "big",
        },
    ),
    (  # acme sets no cache field: the model's policy wins them
        "acme",
        "big",
        {
            "enabled": False,
            "ttl_seconds": 400,
            "max_temperature": 0.5,
            "similarity_threshold": 0.99,
        },
        {
            "enabled": "big",
            "ttl_seconds": "big",
            "max_temperature": "any",
            "similarity_threshold": "big",
        },
    ),
    (  # tenant level: team-small narrows models, so it does not apply
        "team-a",
        "",
        {"enabled": True, "ttl_seconds": 300, "max_temperature": 0.5},
        {"enabled": "team-glob", "ttl_seconds": "team-a", "max_temperature": "any"},
    ),
]


@pytest.mark.parametrize(("tenant", "model", "cache", "origin"), CACHE)
def test_most_specific_policy_wins_each_cache_field(
    settings: Settings, tenant: str, model: str, cache: dict[str, Any], origin: dict[str, str]
) -> None:
    resolved = settings.policies.resolve(tenant, model)
    assert _cache(resolved) == cache
    assert _cache_origin(resolved) == {f"cache.{k}": v for k, v in origin.items()}


def test_origin_names_the_winning_policy_for_every_field(settings: Settings) -> None:
    resolved = settings.policies.resolve("team-a", "big")
    assert dict(resolved.origin) == {
        "cache.enabled": "team-glob",
        "cache.ttl_seconds": "team-a",
        "cache.max_temperature": "any",
        "cache.similarity_threshold": "big",
        "overload.max_in_flight": "any",
        "overload.skip": "team-multi",
        "metrics.per_tenant": "team-glob",
        "degradation.unavailable.mode": "big-glob",
    }
    resolved = settings.policies.resolve("acme", "auto")
    assert dict(resolved.origin) == {
        "cache.enabled": "any",
        "cache.ttl_seconds": "any",
        "cache.max_temperature": "any",
        "overload.max_in_flight": "any",
        "guard.loops.max_rounds": "acme",
        "rate_limits.concurrent": "acme",
    }
    assert CONFIG_FILE == "config.yaml"  # what origin would say of a field nobody set


def test_other_sections_compose_across_policies(settings: Settings) -> None:
    resolved = settings.policies.resolve("team-a", "big")
    assert resolved.overload.max_in_flight == 100  # any
    assert resolved.overload.skip == ["retrieval"]  # team-multi
    assert resolved.metrics.per_tenant is True  # team-glob
    assert resolved.degradation.unavailable.mode == "error"  # big-glob
    # the rest of degradation.unavailable is config.yaml's, not the model default
    assert resolved.degradation.unavailable.retry_after_seconds == 7


def test_fields_nobody_sets_come_from_config_yaml(settings: Settings) -> None:
    file = settings.file
    plain = settings.policies.resolve("other", "small")
    assert plain.guard == file.guard
    assert plain.guard.loops.max_rounds == 12
    assert plain.degradation == file.degradation
    assert plain.routing == file.routing
    assert plain.rate_limits == file.rate_limits.default
    assert plain.knowledge_base.base is None
    assert plain.byok.enabled is False
    assert plain.metrics.per_tenant is False
    # rate limits: the tenant's own entry in rate_limits.tenants, not the default
    team_a = settings.policies.for_tenant("team-a")
    assert team_a.rate_limits == file.rate_limits.tenants["team-a"]
    assert team_a.rate_limits.requests_per_second == 20
    # a policy's rate_limits merges over the tenant's entry of config.yaml
    acme = settings.policies.for_tenant("acme")
    assert acme.rate_limits.concurrent == 9
    assert acme.rate_limits.requests_per_second is None  # acme's entry has none
    # a policy's guard changes only the field it writes
    acme_guard = settings.policies.resolve("acme", "small").guard
    assert acme_guard.loops.max_rounds == 50
    assert acme_guard.loops.max_identical_calls == file.guard.loops.max_identical_calls
    assert acme_guard.tools == file.guard.tools
    # degradation of a request no degradation policy matches
    assert settings.policies.resolve("acme", "small").degradation == file.degradation


def test_routing_overlay_changes_the_alias_and_keeps_scoring(settings: Settings) -> None:
    file = settings.file
    free = settings.policies.resolve("free-1", "auto")
    assert _names(free) == ["any", "free"]
    assert [t.model for t in free.routing.aliases["auto"].tiers] == ["small"]
    assert free.routing.scoring == file.routing.scoring
    assert free.origin["routing.aliases.auto.tiers"] == "free"
    # the same tenant asking for a model, or for nothing in particular: config.yaml's routing
    assert settings.policies.resolve("free-1", "small").routing is file.routing
    assert settings.policies.for_tenant("free-1").routing is file.routing
    assert [t.model for t in file.routing.aliases["auto"].tiers] == ["small", "big"]


# --- why, explain, memo ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tenant", "model", "why"),
    [
        (
            "team-a",
            "small",
            {
                "any": "any tenant, any model",
                "team-glob": "tenant glob 'team-*', any model",
                "team-multi": "tenant glob 'team-*', any model",
                "team-small": "tenant glob 'team-*', model glob 's*'",
                "team-a": "tenant 'team-a' exactly, any model",
            },
        ),
        (
            "other",
            "big",
            {
                "any": "any tenant, any model",
                "big-glob": "any tenant, model glob 'b*'",
                "big": "any tenant, model 'big' exactly",
            },
        ),
        ("team-c", "", {"team-multi": "tenant 'team-c' exactly, any model"}),
    ],
)
def test_why_says_how_each_side_matched(
    settings: Settings, tenant: str, model: str, why: dict[str, str]
) -> None:
    resolved = settings.policies.resolve(tenant, model)
    found = {a.policy.name: a.why() for a in resolved.applied}
    assert {name: found[name] for name in why} == why


def test_explain_lists_the_winner_first(settings: Settings, tmp_path: Path) -> None:
    explained = settings.policies.resolve("team-a", "big").explain()
    assert explained["tenant"] == "team-a"
    assert explained["model"] == "big"
    policies = explained["policies"]
    assert [p["name"] for p in policies] == [
        "team-a",
        "team-multi",
        "team-glob",
        "big",
        "big-glob",
        "any",
    ]
    assert policies[0] == {
        "name": "team-a",
        "source": str(tmp_path / "policies" / "team-a.yaml"),
        "rank": [2, 0],
        "why": "tenant 'team-a' exactly, any model",
        "sets": ["cache.ttl_seconds"],
    }
    assert policies[-1]["sets"] == [
        "cache.enabled",
        "cache.max_temperature",
        "cache.ttl_seconds",
        "overload.max_in_flight",
    ]
    assert list(explained["origin"]) == sorted(explained["origin"])
    assert explained["origin"]["cache.ttl_seconds"] == "team-a"


def test_explain_with_no_policy_applying(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, {}))
    assert settings.policies.resolve("acme", "big").explain() == {
        "tenant": "acme",
        "model": "big",
        "policies": [],
        "origin": {},
    }


def test_resolution_is_memoized(settings: Settings) -> None:
    policies = settings.policies
    first = policies.resolve("team-a", "big")
    assert policies.resolve("team-a", "big") is first
    assert policies.resolve("team-a", "small") is not first
    assert policies.for_tenant("team-a") is policies.resolve("team-a", "")
    assert policies.for_tenant("team-a") is policies.for_tenant("team-a")


def test_of_resolves_a_request_once_and_keeps_it_on_the_request(settings: Settings) -> None:
    ctx = SimpleNamespace(policy=None, tenant="team-a", requested_model="big")
    resolved = settings.policies.of(ctx)
    assert resolved is settings.policies.resolve("team-a", "big")
    assert ctx.policy is resolved
    ctx.requested_model = "small"  # already resolved: kept
    assert settings.policies.of(ctx) is resolved
    anonymous = SimpleNamespace(policy=None, tenant=None, requested_model=None)
    assert settings.policies.of(anonymous) is settings.policies.resolve("", "")


# --- the cache policy of a model, overlaid ---------------------------------------------------


def test_cache_for_overlays_the_models_cache_policy(settings: Settings) -> None:
    big = settings.routes["big"].cache
    assert big == CachePolicy(
        enabled=True, similarity_threshold=0.9, ttl_seconds=60, max_temperature=1.0
    )
    effective = settings.policies.resolve("team-a", "big").cache_for(big)
    assert effective == CachePolicy(
        enabled=True,  # team-glob
        similarity_threshold=0.99,  # big
        ttl_seconds=300,  # team-a
        max_temperature=0.5,  # any
        semantic=True,  # the model's (nobody set it)
        cache_tool_calls=False,
    )
    assert big.ttl_seconds == 60  # the base is not changed
    small = settings.routes["s"].cache
    effective = settings.policies.resolve("team-b", "s").cache_for(small)
    assert effective.semantic is False
    assert effective.enabled is True
    assert effective.similarity_threshold == small.similarity_threshold  # calibrated 0.95


def test_cache_for_without_overrides_is_the_models_own(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, {"acme": POLICIES["acme"]}))
    base = settings.routes["big"].cache
    assert settings.policies.resolve("acme", "big").cache_for(base) is base
    assert PolicySet(settings.file).resolve("x", "big").cache_for(base) is base


def test_anonymous_tenant_is_matched_by_name(tmp_path: Path) -> None:
    """With no auth.keys every caller is auth.anonymous_tenant: policies match it like any."""
    config = CONFIG.replace("auth:\n  keys:", "auth:\n  anonymous_tenant: guest\n  unused:")
    config = "\n".join(ln for ln in config.splitlines() if "KEY_" not in ln and "unused" not in ln)
    policies = {
        "guest": "match: {tenants: [guest]}\ncache: {enabled: true}\n",
        "any": "cache: {enabled: false, ttl_seconds: 5}\n",
    }
    settings = load_settings(write_config(tmp_path, policies, config))
    assert settings.anonymous
    resolved = settings.policies.resolve(settings.file.auth.anonymous_tenant, "small")
    assert _names(resolved) == ["any", "guest"]
    assert _cache(resolved) == {"enabled": True, "ttl_seconds": 5}
    assert resolved.applied[-1].why() == "tenant 'guest' exactly, any model"
