"""A policy whose `match:` names a tenant or model config.yaml does not know loads, and is
noted at that name's line: it would never apply to it."""

from pathlib import Path

from gateway.config.loading import load_settings
from gateway.config.policy_reach import unknown_match_names

CONFIG = """
auth:
  keys: [{env: REACH_KEY, tenant: team-a}]
providers: {d: {type: demo}}
models:
  - {name: chat, provider: d, aliases: [chatty]}
routing:
  aliases:
    auto: {tiers: [{model: chat}]}
"""


def _notes(tmp_path: Path, config: str, policy: str) -> list[str]:
    (tmp_path / "config.yaml").write_text(config)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(policy)
    notes = unknown_match_names(load_settings(tmp_path / "config.yaml"))
    return [n.removeprefix(f"{tmp_path}/policies/p.yaml: ") for n in notes]


def test_known_names_and_globs_are_not_noted(tmp_path: Path) -> None:
    policy = "match:\n  tenants: [team-a, 'team-*']\n  models: [chat, chatty, auto, 'gpt-*']\n"
    assert _notes(tmp_path, CONFIG, policy + "cache: {enabled: false}\n") == []


def test_an_unknown_tenant_and_model_are_noted_at_their_lines(tmp_path: Path) -> None:
    policy = "match:\n  tenants:\n    - team-a\n    - team-b\n  models: [chat, caht]\n"
    assert _notes(tmp_path, CONFIG, policy + "cache: {enabled: false}\n") == [
        "match.tenants[1] (line 4): 'team-b' is unknown (no key of auth.keys is for that "
        "tenant), so this policy never applies to it",
        "match.models[1] (line 5): 'caht' is unknown (no model, alias or routing alias has "
        "that name), so this policy never applies to it",
    ]


def test_without_keys_only_the_anonymous_tenant_is_known(tmp_path: Path) -> None:
    config = CONFIG.replace("  keys: [{env: REACH_KEY, tenant: team-a}]\n", "  keys: []\n")
    (note,) = _notes(tmp_path, config, "match: {tenants: [team-a]}\ncache: {enabled: false}\n")
    assert "with no auth.keys every caller is tenant 'local'" in note
