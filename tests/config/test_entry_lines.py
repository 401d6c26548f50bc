"""A cross-reference error (a name that points nowhere) is reported at the line of the entry
that holds the name, however deep in the file, not at the top of the file or its section."""

import pytest

from gateway.config.loading import ConfigError, parse_config

# Long enough that the top of a section and the offending entry are far apart.
CONFIG = """\
# header comment
server:
  host: 127.0.0.1
providers:
  demo: {type: demo}
  other: {type: demo}
redis:
  namespace: gateway
models:
  - name: a
    provider: demo
  - name: b
    provider: demo
    aliases: [bee]
  - name: c
    deployments:
      - {provider: demo}
      - {provider: other}
    fallbacks: [a, b]
  - name: emb
    provider: demo
    kind: embedding
knowledge_bases:
  kb:
    path: /tmp/kb
    attach:
      tenants: [t1]
      models:
        - a
        - c
routing:
  aliases:
    auto:
      tiers:
        - {model: a, max_score: 0.5}
        - {model: c}
guard:
  compression:
    enabled: false
    summarizer_model: a
auth:
  keys:
    - {env: K1, tenant: t1}
    - {env: K2, tenant: t2}
"""


def _problem_for(old: str, new: str, count: int = 1) -> tuple[str, int]:
    """The one problem of CONFIG with the `count`-th `old` replaced, and that edit's line."""
    at = -1
    for _ in range(count):
        at = CONFIG.index(old, at + 1)
    text = CONFIG[:at] + new + CONFIG[at + len(old) :]
    line = CONFIG[:at].count("\n") + 1
    with pytest.raises(ConfigError) as info:
        parse_config(text, "config.yaml")
    (problem,) = info.value.problems
    return problem, line


@pytest.mark.parametrize(
    ("old", "new", "count", "where", "message"),
    [
        ("provider: demo", "provider: nowhere", 2, "models[1].provider", "unknown provider"),
        ("{provider: other}", "{provider: gone}", 1, "models[2].deployments[1].provider", "gone"),
        ("[a, b]", "[a, missing]", 1, "models[2].fallbacks[1]", "unknown model 'missing'"),
        ("[a, b]", "[a, emb]", 1, "models[2].fallbacks[1]", "'emb' is embedding, not chat"),
        ("[a, b]", "[c]", 1, "models[2].fallbacks[0]", "cannot fall back to itself"),
        ("aliases: [bee]", "aliases: [a]", 1, "models[1].aliases[0]", "'a' is used twice"),
        ("        - c\n", "        - emb\n", 1, "knowledge_bases.kb.attach.models[1]", "emb"),
        ("{model: c}", "{model: nope}", 1, "routing.aliases.auto.tiers[1].model", "'nope'"),
        (
            "summarizer_model: a",
            "summarizer_model: zz",
            1,
            "guard.compression.summarizer_model",
            "zz",
        ),
        ("{env: K2", "{env: K1", 1, "auth.keys[1].env", "'K1' is listed twice"),
    ],
)
def test_a_name_that_points_nowhere_is_reported_at_its_entry(
    old: str, new: str, count: int, where: str, message: str
) -> None:
    problem, line = _problem_for(old, new, count)
    assert problem.startswith(f"{where} (line {line}): "), problem
    assert message in problem


def test_an_alias_that_shadows_a_model_is_reported_at_the_alias() -> None:
    text = CONFIG.replace("    auto:\n", "    b:\n")
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    (problem,) = info.value.problems
    line = CONFIG[: CONFIG.index("    auto:")].count("\n") + 2  # the alias's first field
    assert problem == f"routing.aliases.b (line {line}): 'b' is already a model name or alias"


def test_a_redis_namespace_that_disagrees_is_reported_at_its_line() -> None:
    text = CONFIG + "cache:\n  store:\n    type: redis\n    namespace: other\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    (problem,) = info.value.problems
    line = text.count("\n")  # the last line
    assert problem.startswith(f"cache.store.namespace (line {line}): "), problem
