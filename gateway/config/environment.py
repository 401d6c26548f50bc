"""The environment variables a config names, and what each one turns off while it is unset.

`gateway check` and `gateway serve` list them, so an unset tenant key is named before every
request of that tenant gets 401. Serious ones (callers the config names are refused, or a
door the config meant to lock is open) are warnings; optional parts switched off are notes.
A variable may be set only where the gateway runs, so neither fails `check` unless asked
(`gateway check --require-env`).

A variable that is set to a placeholder (`replace-me`, `sk-...`: config/placeholders.py) is
another matter: the config does not load (`placeholder_problems`, called by build_settings),
so `serve` refuses to start, `check` fails and a reload keeps the running config. The message
names the variable and the fix, never the value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.config.file import ConfigFile
from gateway.config.placeholders import placeholder

# Every field of config.yaml that names a variable, as a path pattern (`*`: any name, `[]`:
# any entry). tests/config/test_environment.py checks no `*_env` field is missing here.
ENV_FIELDS = frozenset(
    {
        "providers.*.api_key_env",
        "auth.keys[].env",
        "auth.admin_key_env",
        "auth.metrics_key_env",
        "knowledge_bases.*.api_key_env",
    }
)
_Unset = Callable[[str | None], bool]  # is this variable (if any is named) unset?


@dataclass(frozen=True, slots=True)
class UnsetVariable:
    name: str  # the variable: OPENAI_API_KEY
    where: str  # the field naming it: providers.openai.api_key_env
    effect: str  # what is off while it is unset
    serious: bool  # callers the config names are refused, or something meant locked is open

    def describe(self) -> str:
        return f"{self.name} is not set ({self.where}): {self.effect}"


def unset_variables(
    file: ConfigFile, environ: Mapping[str, str] | None = None
) -> list[UnsetVariable]:
    """Each variable the config names that is unset (or empty) in `environ`, serious first."""
    env = os.environ if environ is None else environ

    def unset(name: str | None) -> bool:
        return bool(name) and not env.get(name or "")

    found = [*_providers(file, unset), *_auth(file, unset)]
    for name, kb in file.knowledge_bases.items():
        if unset(kb.api_key_env):
            effect = (
                f"knowledge base {name!r} calls its retriever without a token (a retriever "
                "that needs one refuses, and its answers go ungrounded)"
            )
            found.append(
                UnsetVariable(
                    str(kb.api_key_env), f"knowledge_bases.{name}.api_key_env", effect, True
                )
            )
    return sorted(found, key=lambda v: not v.serious)


def named_variables(file: ConfigFile) -> list[tuple[str, str, str]]:
    """Every variable the config names (each field of ENV_FIELDS): (variable, the field
    naming it, the fix for a wrong value)."""
    fresh = "a new one: openssl rand -hex 32"
    found = [
        (
            p.api_key_env,
            f"providers.{name}.api_key_env",
            f"put the API key of provider {name!r} there, or unset it to disable the provider",
        )
        for name, p in file.providers.items()
        if p.api_key_env
    ]
    auth = file.auth
    found += [
        (key.env, f"auth.keys[{i}].env", f"put the key of tenant {key.tenant!r} there ({fresh})")
        for i, key in enumerate(auth.keys)
    ]
    if auth.admin_key_env:
        fix = f"put an admin key of your own there ({fresh}), or unset it to turn the admin API off"
        found.append((auth.admin_key_env, "auth.admin_key_env", fix))
    if auth.metrics_key_env:
        fix = f"put a key of your own there ({fresh}) and give it to Prometheus"
        found.append((auth.metrics_key_env, "auth.metrics_key_env", fix))
    found += [
        (kb.api_key_env, f"knowledge_bases.{name}.api_key_env", "put the retriever's token there")
        for name, kb in file.knowledge_bases.items()
        if kb.api_key_env
    ]
    return found


def placeholder_problems(file: ConfigFile, environ: Mapping[str, str] | None = None) -> list[str]:
    """One line for each secret that holds a placeholder: a variable the config names, or the
    password in the Redis URL the sharing parts use. Names where, never the value."""
    env = os.environ if environ is None else environ
    problems = []
    for variable, where, fix in named_variables(file):
        kind = placeholder(env.get(variable, ""))
        if kind:
            problems.append(
                f"{variable} ({where}) holds a placeholder ({kind}), not a secret: {fix}"
            )
    for url in sorted({target.url for target in file.shared_redis().targets.values()}):
        kind = placeholder(urlsplit(url).password or "")
        if kind:
            problems.append(
                f"redis.url: the password in it is a placeholder ({kind}): put the Redis "
                "server's password there (redis://:PASSWORD@host:6379/0), or none if it needs none"
            )
    return problems


def refuse_placeholders(file: ConfigFile, environ: Mapping[str, str]) -> None:
    """Raises ValueError, one problem a line, when a secret holds a placeholder."""
    problems = placeholder_problems(file, environ)
    if problems:
        raise ValueError("\n".join(problems))


def no_tenant_can_sign_in(file: ConfigFile, unset: list[UnsetVariable]) -> bool:
    """Keys are listed (so there is no anonymous tenant) and none of them is set."""
    missing = {v.where for v in unset}
    keys = file.auth.keys
    return bool(keys) and all(f"auth.keys[{i}].env" in missing for i in range(len(keys)))


def _providers(file: ConfigFile, unset: _Unset) -> list[UnsetVariable]:
    disabled = {name for name, p in file.providers.items() if unset(p.api_key_env)}
    found = []
    for name in sorted(disabled):
        lost = [
            m.name
            for m in file.models
            if any(d.provider == name for d in m.deployment_list())
            and all(d.provider in disabled for d in m.deployment_list())
        ]
        effect = f"provider {name!r} is disabled"
        if lost:
            effect += f"; not served: {', '.join(lost)}"
        variable = str(file.providers[name].api_key_env)
        found.append(UnsetVariable(variable, f"providers.{name}.api_key_env", effect, False))
    return found


def _auth(file: ConfigFile, unset: _Unset) -> list[UnsetVariable]:
    auth = file.auth
    found = [
        UnsetVariable(
            key.env,
            f"auth.keys[{i}].env",
            f"tenant {key.tenant!r} has no key, so every request meant for it gets 401",
            True,
        )
        for i, key in enumerate(auth.keys)
        if unset(key.env)
    ]
    if auth.metrics_key_env and unset(auth.metrics_key_env):
        effect = "/metrics needs no key: it is open to anyone, as if no key were configured"
        found.append(UnsetVariable(auth.metrics_key_env, "auth.metrics_key_env", effect, True))
    if auth.admin_key_env and unset(auth.admin_key_env):
        effect = "the admin API (/admin/...) is off: it answers 401"
        found.append(UnsetVariable(auth.admin_key_env, "auth.admin_key_env", effect, False))
    return found
