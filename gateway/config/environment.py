"""The environment variables a config names, and what each one turns off while it is unset.

`gateway check` and `gateway serve` list them, so an unset tenant key is named before every
request of that tenant gets 401. Serious ones (callers the config names are refused, or a
door the config meant to lock is open) are warnings; optional parts switched off are notes.
A variable may be set only where the gateway runs, so neither fails `check` unless asked
(`gateway check --require-env`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.config.file import ConfigFile

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
