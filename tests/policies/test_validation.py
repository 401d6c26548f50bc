"""Bad policy files and the exact problems `load_settings` reports for them (file, dotted field,
line), next to good ones that load. The config they are checked against is CONFIG below."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings
from gateway.config.loading import MAX_EXPANDED_VALUES, MAX_POLICY_BYTES

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
auth:
  keys:
    - {env: KEY_ACME, tenant: acme}
    - {env: KEY_TEAM_A, tenant: team-a}
providers:
  openai: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: FAKE_OPENAI_KEY}
  local: {type: demo}
rate_limits:
  default: {requests_per_second: 5}
  tenants:
    acme: {concurrent: 3}
knowledge_bases:
  kb1: {path: data/kb/kb1}
routing:
  aliases:
    auto:
      tiers: [{model: small, max_score: 0.5}, {model: big}]
models:
  - {name: small, provider: openai, aliases: [s]}
  - {name: big, provider: openai}
  - {name: emb, provider: openai, kind: embedding}
  - {name: d, provider: local}
"""
# Every name a model can be asked by (and "" for the tenant level), as the tie check tries them.
MODEL_NAMES = sorted(["", "auto", "big", "d", "emb", "s", "small"])
DIR = "<dir>"  # the policies directory, in expected messages


def write(root: Path, files: dict[str, str], config: str = CONFIG) -> Path:
    (root / "policies").mkdir(parents=True, exist_ok=True)
    path = root / "config.yaml"
    path.write_text(textwrap.dedent(config), "utf-8")
    for name, text in files.items():
        (root / "policies" / name).write_text(textwrap.dedent(text), "utf-8")
    return path


def problems_of(root: Path, files: dict[str, str], config: str = CONFIG) -> list[str]:
    path = write(root, files, config)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.source == str(path)
    return info.value.problems


def _tie(a: str, b: str, tenant: str, model: str, fields: str) -> str:
    return (
        f"tie: <dir>/{a}.yaml and <dir>/{b}.yaml are equally specific (e.g. for tenant "
        f"'{tenant}', model '{model}') and both set {fields}; make one more specific or set the "
        "field in only one of them"
    )


BAD = [
    (
        "invalid-yaml",
        {"a.yaml": "match:\n  tenants: [acme]\ncache:\n  enabled: [true\n"},
        [
            # the line itself is not quoted: it may hold a secret
            "<dir>/a.yaml: not valid YAML: expected ',' or ']', but got '<stream end>' "
            "(line 5, column 1)"
        ],
    ),
    (
        "half-written-scalar",
        {"a.yaml": "match:\n  tenants: [acme]\ncache:\n  enabled: tr"},
        [
            "<dir>/a.yaml: cache.enabled (line 4): Input should be a valid boolean, "
            "unable to interpret input"
        ],
    ),
    (
        "not-a-mapping",
        {"a.yaml": "- cache\n- guard\n"},
        ["<dir>/a.yaml: a policy is a mapping with `match:` and the sections it sets"],
    ),
    (
        "a-scalar",
        {"a.yaml": "just a string\n"},
        ["<dir>/a.yaml: a policy is a mapping with `match:` and the sections it sets"],
    ),
    (
        "empty-file",
        {"a.yaml": ""},
        [
            "<dir>/a.yaml: the file is empty; a policy needs `match:` and the sections it sets (to "
            "turn a policy off, move its file out of the directory)"
        ],
    ),
    (
        "only-comments",
        {"a.yaml": "# cache:\n#   enabled: true\n"},
        [
            "<dir>/a.yaml: the file is empty; a policy needs `match:` and the sections it sets (to "
            "turn a policy off, move its file out of the directory)"
        ],
    ),
    (
        "unknown-top-level-field",
        {"a.yaml": "match: {tenants: [acme]}\ncaches: {enabled: true}\n"},
        [
            "<dir>/a.yaml: caches (line 2): not a policy field; did you mean 'cache'? allowed: "
            "byok, cache, "
            "degradation, description, guard, knowledge_base, match, metrics, overload, "
            "rate_limits, routing, storage"
        ],
    ),
    (
        "unknown-match-field",
        {"a.yaml": "match:\n  tenants: [acme]\n  model: [big]\ncache: {enabled: true}\n"},
        [
            "<dir>/a.yaml: match.model (line 3): Extra inputs are not permitted (did you mean "
            "'models'?)"
        ],
    ),
    (
        "match-empty-list",
        {"a.yaml": "match:\n  tenants: []\ncache: {enabled: true}\n"},
        [
            "<dir>/a.yaml: match.tenants (line 2): List should have at least 1 item after "
            "validation, not 0"
        ],
    ),
    (
        "match-not-a-list",
        {"a.yaml": "match:\n  tenants: acme\ncache: {enabled: true}\n"},
        ["<dir>/a.yaml: match.tenants (line 2): Input should be a valid list"],
    ),
    (
        "match-not-a-mapping",
        {"a.yaml": "match: [acme]\ncache: {enabled: true}\n"},
        [
            "<dir>/a.yaml: match (line 1): Input should be a valid dictionary or instance of "
            "PolicyMatch"
        ],
    ),
    (
        "section-not-a-mapping",
        {"a.yaml": "match: {tenants: [acme]}\ncache: true\n"},
        ["<dir>/a.yaml: cache (line 2): must be a mapping"],
    ),
    (
        "cache-threshold-above-1",
        {"a.yaml": "match:\n  tenants: [acme]\ncache:\n  similarity_threshold: 1.5\n"},
        [
            "<dir>/a.yaml: cache.similarity_threshold (line 4): Input should be less than or "
            "equal to 1"
        ],
    ),
    (
        "cache-enabled-maybe",
        {"a.yaml": "cache: {enabled: maybe}\n"},
        [
            "<dir>/a.yaml: cache.enabled (line 1): Input should be a valid boolean, unable to "
            "interpret input"
        ],
    ),
    (
        "guard-wrong-type-deep",
        {
            "a.yaml": """\
                match:
                  tenants: [acme]
                guard:
                  tools:
                    rules:
                      pay:
                        arguments:
                          amount: {minimum: zero}
            """
        },
        [
            "<dir>/a.yaml: guard.tools.rules.pay.arguments.amount.minimum (line 8): Input should "
            "be a valid number, unable to parse string as a number"
        ],
    ),
    (
        "guard-loops-wrong-type",
        {"a.yaml": "guard:\n  loops:\n    max_rounds: many\n"},
        [
            "<dir>/a.yaml: guard.loops.max_rounds (line 3): Input should be a valid integer, "
            "unable to parse string as an integer"
        ],
    ),
    (
        "guard-compression-keep-not-below-max",
        {"a.yaml": "guard:\n  compression:\n    keep_turns: 30\n"},
        ["<dir>/a.yaml: guard.compression (line 3): keep_turns must be smaller than max_turns"],
    ),
    (
        "guard-summarizer-not-chat",
        {"a.yaml": "guard:\n  compression:\n    summarizer_model: emb\n"},
        [
            "<dir>/a.yaml: guard.compression.summarizer_model (line 3): 'emb' is not a "
            "configured chat model"
        ],
    ),
    (
        "overload-skip-unknown",
        {"a.yaml": "overload: {skip: [everything]}\n"},
        [
            "<dir>/a.yaml: overload.skip.0 (line 1): Input should be 'retrieval', "
            "'compression' or 'verification'"
        ],
    ),
    (
        "rate-limit-with-models",
        {"a.yaml": "match:\n  models: [big]\nrate_limits:\n  concurrent: 4\n"},
        [
            "<dir>/a.yaml: match.models (line 2): rate_limits applies per tenant (decided before "
            "the request is read), so a policy that sets it cannot narrow models"
        ],
    ),
    (
        "byok-with-models",
        {
            "a.yaml": """\
                match:
                  tenants: [acme]
                  models: [big]
                byok:
                  enabled: true
                  providers: [openai]
            """
        },
        [
            "<dir>/a.yaml: match.models (line 3): byok applies per tenant (decided before "
            "the request is read), so a policy that sets it cannot narrow models"
        ],
    ),
    (
        "rate-limit-with-star-and-a-model",
        {"a.yaml": 'match: {tenants: [acme], models: ["*", big]}\nrate_limits: {concurrent: 2}\n'},
        [
            "<dir>/a.yaml: match.models (line 1): rate_limits applies per tenant (decided before "
            "the request is read), so a policy that sets it cannot narrow models"
        ],
    ),
    (
        # acme's own limits in config.yaml have no requests_per_second to merge under burst
        "burst-without-rate-anywhere",
        {"a.yaml": "match:\n  tenants: [acme]\nrate_limits:\n  burst: 10\n"},
        # valid over config.yaml's default limits; refused for acme, whose own have no rate
        ["<dir>/a.yaml, for tenant 'acme': rate_limits: burst needs requests_per_second"],
    ),
    (
        "routing-alias-not-in-config",
        {"a.yaml": "routing:\n  aliases:\n    fast:\n      tiers: [{model: small}]\n"},
        [
            "<dir>/a.yaml: routing.aliases.fast (line 4): not an alias of config.yaml; policies "
            "change aliases, config.yaml defines them (defined: auto)"
        ],
    ),
    (
        "routing-tier-unknown-model",
        {"a.yaml": "routing:\n  aliases:\n    auto:\n      tiers: [{model: nope}]\n"},
        [
            "<dir>/a.yaml: routing.aliases.auto.tiers.0.model (line 4): 'nope' is not a "
            "configured chat model"
        ],
    ),
    (
        "routing-tier-embedding-model",
        {"a.yaml": "routing:\n  aliases:\n    auto:\n      tiers: [{model: emb}]\n"},
        [
            "<dir>/a.yaml: routing.aliases.auto.tiers.0.model (line 4): 'emb' is not a "
            "configured chat model"
        ],
    ),
    (
        "routing-floor-above-tiers",
        {"a.yaml": "routing:\n  aliases:\n    auto:\n      escalate: {tools: 5}\n"},
        ["<dir>/a.yaml: routing.aliases.auto (line 4): escalate: a tier above the highest (1)"],
    ),
    (
        "routing-tiers-out-of-order",
        {
            "a.yaml": """\
                routing:
                  aliases:
                    auto:
                      tiers:
                        - {model: small, max_score: 0.7}
                        - {model: big, max_score: 0.2}
                        - {model: d}
            """
        },
        [
            "<dir>/a.yaml: routing.aliases.auto (line 4): tiers must go from cheap to strong: "
            "max_score increasing"
        ],
    ),
    (
        "knowledge-base-unknown",
        {"a.yaml": "knowledge_base:\n  base: nope\n"},
        [
            "<dir>/a.yaml: knowledge_base.base (line 2): unknown knowledge base 'nope' "
            "(kb1; or 'none')"
        ],
    ),
    (
        "byok-enabled-without-providers",
        {"a.yaml": "byok:\n  enabled: true\n"},
        ["<dir>/a.yaml: byok.providers (line 2): name the providers the caller's key is for"],
    ),
    (
        "byok-provider-not-openai",
        {"a.yaml": "byok:\n  enabled: true\n  providers: [local]\n"},
        [
            "<dir>/a.yaml: byok.providers.0 (line 3): 'local' is not an 'openai' provider of "
            "config.yaml"
        ],
    ),
    (
        "byok-provider-unknown",
        {"a.yaml": "byok:\n  enabled: true\n  providers: [nope]\n"},
        [
            "<dir>/a.yaml: byok.providers.0 (line 3): 'nope' is not an 'openai' provider of "
            "config.yaml"
        ],
    ),
    (
        "two-files-same-stem",
        {"a.yaml": "cache: {enabled: true}\n", "a.yml": "metrics: {per_tenant: true}\n"},
        ["two policy files are named 'a': <dir>/a.yaml and <dir>/a.yml (keep one)"],
    ),
    (
        "every-bad-file-is-reported",
        {
            "a.yaml": "cache: {ttl_seconds: 0}\n",
            "b.yaml": "- x\n",
            "c.yaml": "cache: {enabled: true}\n",
        },
        [
            "<dir>/a.yaml: cache.ttl_seconds (line 1): Input should be greater than or equal to 1",
            "<dir>/b.yaml: a policy is a mapping with `match:` and the sections it sets",
        ],
    ),
    (
        "tie-exact-tenant-and-model",
        {
            "a.yaml": "match: {tenants: [acme], models: [big]}\ncache: {enabled: true}\n",
            "b.yaml": "match: {tenants: [acme], models: [big]}\ncache: {enabled: false}\n",
        },
        [_tie("a", "b", "acme", "big", "cache.enabled")],
    ),
    (
        "tie-names-every-shared-field",
        {
            "a.yaml": (
                "match: {tenants: [acme], models: [big]}\n"
                "cache: {enabled: true, ttl_seconds: 5, semantic: false}\n"
            ),
            "b.yaml": (
                "match: {tenants: [acme], models: [big]}\ncache: {enabled: false, ttl_seconds: 6}\n"
            ),
        },
        [_tie("a", "b", "acme", "big", "cache.enabled, cache.ttl_seconds")],
    ),
    (
        # (acme, *) and (*, big) do not tie: the tenant side ranks first
        "tie-two-globs-on-one-model",
        {
            "a.yaml": 'match: {models: ["b*"]}\ncache: {enabled: true}\n',
            "b.yaml": 'match: {models: ["?ig"]}\ncache: {enabled: false}\n',
        },
        [_tie("a", "b", "", "big", "cache.enabled")],  # once, with the first example
    ),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_policies_are_refused_with_exact_problems(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    directory = str(tmp_path / "policies")
    problems = problems_of(tmp_path, files)
    assert problems == [p.replace(DIR, directory) for p in expected]


def test_a_tie_for_a_whole_tenant_is_reported_once(tmp_path: Path) -> None:
    """One tie between two tenant-wide policies comes out once, with the first example."""
    files = {
        "a.yaml": "match: {tenants: [acme]}\ncache: {enabled: true}\n",
        "b.yaml": "match: {tenants: [acme]}\ncache: {enabled: false}\n",
    }
    directory = str(tmp_path / "policies")
    expected = [_tie("a", "b", "acme", sorted(MODEL_NAMES)[0], "cache.enabled")]
    expected = [p.replace(DIR, directory) for p in expected]
    assert problems_of(tmp_path, files) == expected


def test_a_glob_tie_names_the_example_tenant_made_from_the_glob(tmp_path: Path) -> None:
    """Ties are looked for on an example name of every pattern too: `team-*` gives 'team-'."""
    files = {
        "a.yaml": "match: {tenants: ['team-*'], models: [big]}\ncache: {enabled: true}\n",
        "b.yaml": "match: {tenants: ['t*'], models: [big]}\ncache: {enabled: false}\n",
    }
    directory = str(tmp_path / "policies")
    expected = [_tie("a", "b", "team-", "big", "cache.enabled")]
    assert problems_of(tmp_path, files) == [p.replace(DIR, directory) for p in expected]


def test_cli_check_prints_each_problem_and_fails(tmp_path: Path) -> None:
    path = write(tmp_path, {"a.yaml": "knowledge_base:\n  base: nope\n"})
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{path}: invalid configuration",
        f"  - {tmp_path / 'policies' / 'a.yaml'}: knowledge_base.base (line 2): unknown knowledge "
        "base 'nope' (kb1; or 'none')",
    ]


# --- good policy files ---------------------------------------------------------------------

GOOD = [
    ("no-policies", {}),
    ("match-only", {"a.yaml": "match: {tenants: [acme]}\n"}),
    ("description-only", {"a.yaml": "description: nothing but words\n"}),
    ("empty-match", {"a.yaml": "match: {}\ncache: {enabled: true}\n"}),
    ("empty-section", {"a.yaml": "cache: {}\n"}),
    ("yml-suffix", {"a.yml": "cache: {enabled: true}\n"}),
    # acme has no rate of its own, but a policy can give it one and a burst with it
    (
        "burst-with-rate",
        {"a.yaml": "match: {tenants: [acme]}\nrate_limits: {requests_per_second: 2, burst: 4}\n"},
    ),
    # team-a has config.yaml's default limits, whose requests_per_second the burst merges over
    (
        "burst-over-default-rate",
        {"a.yaml": "match:\n  tenants: [team-a]\nrate_limits:\n  burst: 10\n"},
    ),
    (
        "rate-limit-models-star",
        {"a.yaml": 'match: {tenants: [acme], models: ["*"]}\nrate_limits: {concurrent: 2}\n'},
    ),
    (
        "byok-openai",
        {"a.yaml": "match: {tenants: [partner-*]}\nbyok: {enabled: true, providers: [openai]}\n"},
    ),
    ("byok-disabled", {"a.yaml": "byok: {enabled: false}\n"}),
    ("knowledge-none", {"a.yaml": "knowledge_base: {base: none}\n"}),
    ("knowledge-kb", {"a.yaml": "knowledge_base: {base: kb1, min_chunks: 2, min_score: 0.5}\n"}),
    (
        "one-tier-alias",
        {
            "a.yaml": "match: {models: [auto]}\n"
            "routing:\n  aliases:\n    auto:\n      tiers: [{model: small}]\n"
        },
    ),
    ("alias-when-open", {"a.yaml": "routing:\n  aliases:\n    auto:\n      when_open: down\n"}),
    (
        "guard-rule",
        {
            "a.yaml": "guard:\n  tools:\n    rules:\n"
            "      pay: {arguments: {amount: {minimum: 0}}}\n"
        },
    ),
    (
        "guard-summarizer",
        {"a.yaml": "guard:\n  compression: {enabled: true, summarizer_model: s}\n"},
    ),
    ("disclaimer-other-language", {"a.yaml": "degradation:\n  disclaimer:\n    zh: x\n"}),
    (
        "overload-and-metrics",
        {
            "a.yaml": "overload: {max_in_flight: 5, skip: [retrieval]}\n"
            "metrics: {per_tenant: true}\n"
        },
    ),
    (
        "no-tie-different-fields",
        {
            "a.yaml": "match: {tenants: [acme]}\ncache: {enabled: true}\n",
            "b.yaml": "match: {tenants: [acme]}\ncache: {ttl_seconds: 5}\n",
        },
    ),
    (
        "no-tie-one-more-specific",
        {
            "a.yaml": "match: {tenants: [team-a]}\ncache: {enabled: true}\n",
            "b.yaml": "match: {tenants: ['t*']}\ncache: {enabled: false}\n",
        },
    ),
    (
        "no-tie-tenant-side-outranks-model-side",
        {
            "a.yaml": "match: {tenants: [acme]}\ncache: {enabled: true}\n",
            "b.yaml": "match: {models: [big]}\ncache: {enabled: false}\n",
        },
    ),
    (
        "no-tie-disjoint-tenants",
        {
            "a.yaml": "match: {tenants: [acme]}\ncache: {enabled: true}\n",
            "b.yaml": "match: {tenants: [team-a]}\ncache: {enabled: false}\n",
        },
    ),
    (
        "no-tie-disjoint-globs",
        {
            "a.yaml": "match: {tenants: ['team-*']}\ncache: {enabled: true}\n",
            "b.yaml": "match: {tenants: ['free-*']}\ncache: {enabled: false}\n",
        },
    ),
    ("not-yaml-files-ignored", {"README.md": "- not a policy\n", "notes.txt": "::"}),
]


@pytest.mark.parametrize("files", [c[1] for c in GOOD], ids=[c[0] for c in GOOD])
def test_good_policies_load(tmp_path: Path, files: dict[str, str]) -> None:
    settings = load_settings(write(tmp_path, files))
    loaded = {p.name for p in settings.policies.policies}
    assert loaded == {Path(n).stem for n in files if n.endswith((".yaml", ".yml"))}


def test_subdirectories_are_not_loaded(tmp_path: Path) -> None:
    (tmp_path / "policies" / "examples").mkdir(parents=True)
    (tmp_path / "policies" / "examples" / "bad.yaml").write_text("- not a policy\n")
    settings = load_settings(write(tmp_path, {}))
    assert settings.policies.policies == ()


def test_a_missing_policies_directory_is_no_policies(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(CONFIG) + "policies: {dir: nowhere}\n")
    assert load_settings(path).policies.policies == ()


def test_each_policy_must_be_valid_alone_over_config_yaml(tmp_path: Path) -> None:
    """max_turns 6 under config.yaml's keep_turns (8) is refused, even though the less specific
    policy's keep_turns 4 would make every request it applies to valid."""
    files = {
        "a.yaml": "guard:\n  compression: {max_turns: 10, keep_turns: 4}\n",
        "b.yaml": "match: {tenants: [acme]}\nguard:\n  compression: {max_turns: 6}\n",
    }
    assert problems_of(tmp_path, files) == [
        f"{tmp_path / 'policies' / 'b.yaml'}: guard.compression (line 3): keep_turns must be "
        "smaller than max_turns"
    ]


def test_combinations_that_do_not_validate_are_refused(tmp_path: Path) -> None:
    files = {
        "a.yaml": "guard:\n  compression: {max_turns: 10}\n",
        "b.yaml": "match: {tenants: [acme]}\nguard:\n  compression: {keep_turns: 9}\n",
        "c.yaml": "match: {models: [big]}\nguard:\n  compression: {max_turns: 9}\n",
    }
    problems = problems_of(tmp_path, files)
    directory = tmp_path / "policies"
    assert problems == [
        f"{directory / 'a.yaml'} and {directory / 'c.yaml'} and {directory / 'b.yaml'} "
        "together, for tenant 'acme', model 'big': guard.compression: keep_turns must be "
        "smaller than max_turns"
    ]


# --- regressions: bugs found by these tests, fixed in the gateway -----------------------------


def test_fixed_tenant_wide_burst_is_checked_for_every_config_tenant(tmp_path: Path) -> None:
    """Was a bug (config/policy_set.py, PolicySet.check / validate_policy): a `tenants: ["*"]`
    policy setting only `rate_limits.burst` is validated for the example tenant "" (the
    default limits, which have a rate) and PolicySet.check() builds only combinations of two
    or more policies. acme's own limits in config.yaml have no requests_per_second, so for
    acme the merge is invalid: the set loads, and at request time resolve() logs an error
    and drops *every* policy for acme. The load should refuse it instead."""
    files = {"a.yaml": "rate_limits:\n  burst: 10\ncache: {enabled: true}\n"}
    path = write(tmp_path, files)
    try:
        settings = load_settings(path)
    except ConfigError as err:
        assert any("acme" in p and "burst needs requests_per_second" in p for p in err.problems)
        return
    resolved = settings.policies.for_tenant("acme")
    assert [a.policy.name for a in resolved.applied] == ["a"], "loaded, then dropped for acme"


def test_fixed_validation_of_a_multi_tenant_policy_is_deterministic(tmp_path: Path) -> None:
    """Was a bug (gateway/config/policy_set.py, validate_policy: `next(iter(_examples(...)))`): a
    policy is checked for one example tenant taken from a *set*, so which of its tenants is
    checked depends on string hashing (PYTHONHASHSEED). `tenants: [acme, team-a]` with only a
    burst is refused in some processes (acme checked) and loaded in others (team-a checked)."""
    path = write(
        tmp_path, {"a.yaml": "match: {tenants: [acme, team-a]}\nrate_limits: {burst: 10}\n"}
    )
    script = (
        "import sys\n"
        "from gateway.config import ConfigError, load_settings\n"
        "try:\n    load_settings(sys.argv[1])\nexcept ConfigError:\n    print('refused')\n"
        "else:\n    print('loaded')\n"
    )
    outcomes = set()
    for seed in range(8):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        result = subprocess.run(
            [sys.executable, "-c", script, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        outcomes.add(result.stdout.strip())
    assert outcomes == {"refused"}


def test_fixed_combined_routing_overlays_are_cross_checked(tmp_path: Path) -> None:
    """Was a bug (config/policy_set.py, PolicySet.check/build): the routing cross-checks of
    config.yaml (tiers name chat models, escalation floors within the tiers) run on each policy
    alone (_check_references), not on combinations. Here one policy leaves `auto` one tier and
    a more specific one sets a floor of tier 1: each is valid alone, together acme's `auto` has
    a floor above its highest tier. The router then reports "moved-down", or raises IndexError
    on config.tiers[1] when the only tier's model is unavailable. The load should refuse it."""
    files = {
        "a.yaml": "match: {models: [auto]}\n"
        "routing:\n  aliases:\n    auto:\n      tiers: [{model: small}]\n",
        "b.yaml": "match: {tenants: [acme]}\n"
        "routing:\n  aliases:\n    auto:\n      escalate: {tools: 1}\n",
    }
    problems = problems_of(tmp_path, files)
    assert any("a tier above the highest" in p for p in problems), problems


def test_fixed_policy_min_chunks_cannot_exceed_the_bases_top_k(tmp_path: Path) -> None:
    """Was a bug (gateway/config/policy_set.py, _check_references): config.yaml refuses a knowledge
    base whose min_chunks exceeds its top_k ("min_chunks cannot exceed top_k"), but a policy
    naming that base with a larger min_chunks loads; gateway/rag/service.py then can never
    reach level 1 (it keeps at most top_k passages), so every answer is ungrounded."""
    files = {"a.yaml": "knowledge_base:\n  base: kb1\n  min_chunks: 10\n"}  # kb1: top_k 4
    problems = problems_of(tmp_path, files)
    assert any("min_chunks" in p and "top_k" in p for p in problems), problems


# --- one name per concept: the old section names ------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "body"),
    [
        ("rate_limit", "rate_limits", "{concurrent: 2}"),
        ("knowledge", "knowledge_base", "{base: kb1, min_chunks: 2}"),
    ],
)
def test_an_old_section_name_loads_as_the_new_one_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, old: str, new: str, body: str
) -> None:
    match = 'match: {tenants: [acme], models: ["*"]}\n'
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    with caplog.at_level("WARNING", logger="gateway.policies"):
        before = load_settings(write(old_dir, {"a.yaml": f"{match}{old}: {body}\n"}))
    renamed = load_settings(write(new_dir, {"a.yaml": f"{match}{new}: {body}\n"}))
    assert getattr(before.policies.resolve("acme", "small"), new) == getattr(
        renamed.policies.resolve("acme", "small"), new
    )
    assert any(f"`{old}` is now called `{new}`" in r.getMessage() for r in caplog.records)


def test_a_file_giving_the_old_and_the_new_name_is_refused(tmp_path: Path) -> None:
    files = {"a.yaml": "rate_limit: {concurrent: 2}\nrate_limits: {concurrent: 3}\n"}
    directory = str(tmp_path / "policies")
    assert problems_of(tmp_path, files) == [
        f"{directory}/a.yaml: rate_limit (line 1): is the old name of `rate_limits`, which "
        "this file also sets"
    ]


# --- YAML aliases and file size are bounded (docs/RELIABILITY.md, "Per-request bounds") -------


def _alias_bomb(levels: int = 9) -> str:
    """Nine anchors, each a list of nine aliases of the one before: ~390 million values."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_a_policy_with_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    bomb = "match: {tenants: [acme]}\ndescription: &d x\n" + _alias_bomb()
    problems = problems_of(tmp_path, {"bomb.yaml": bomb})
    assert problems == [
        f"{tmp_path / 'policies' / 'bomb.yaml'}: YAML aliases expand this file to more than "
        f"{MAX_EXPANDED_VALUES} values (490329071); write the repeated parts out, or use fewer "
        "aliases"
    ]
    assert time.monotonic() - started < 2


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, {"a.yaml": "match: &m {tenants: [acme], x: *m}\n"})
    assert len(problems) == 1 and "a recursive alias" in problems[0]


def test_anchors_that_repeat_a_block_are_fine(tmp_path: Path) -> None:
    files = {
        "a.yaml": "match: {tenants: &who [acme]}\nrate_limits: &rl {concurrent: 2}\n",
        "b.yaml": "match: {tenants: [team-a], models: &m [small]}\ncache: {enabled: true}\n",
    }
    settings = load_settings(write(tmp_path, files))
    assert {p.name for p in settings.policies.policies} == {"a", "b"}


def test_a_policy_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    padding = "# " + "x" * 1000 + "\n"
    text = "match: {tenants: [acme]}\n" + padding * (MAX_POLICY_BYTES // len(padding) + 1)
    problems = problems_of(tmp_path, {"big.yaml": text})
    assert problems == [
        f"{tmp_path / 'policies' / 'big.yaml'}: the file is {len(text)} bytes; a policy file "
        f"may hold at most {MAX_POLICY_BYTES}"
    ]


def test_config_yaml_with_an_alias_bomb_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, {}, CONFIG + "x-bomb:\n" + textwrap.indent(_alias_bomb(), "  "))
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "YAML aliases expand this file" in info.value.problems[0]
