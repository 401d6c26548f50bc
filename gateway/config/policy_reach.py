"""Policies that name a tenant or model config.yaml does not know: the policy loads, and
never applies to that name (a typo in `match:` fails silently otherwise). `gateway check`
notes each one at its line. Globs are not judged: they may be written for names to come."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.config.loading import line_of
from gateway.config.policy_set import Policy
from gateway.config.settings import Settings

_GLOB_CHARS = frozenset("*?[")


def unknown_match_names(settings: Settings) -> list[str]:
    """One line per exact name in a policy's `match:` that no request can carry."""
    file = settings.file
    tenants = {k.tenant for k in file.auth.keys} or {file.auth.anonymous_tenant}
    anonymous = f"with no auth.keys every caller is tenant {file.auth.anonymous_tenant!r}"
    no_tenant = "no key of auth.keys is for that tenant" if file.auth.keys else anonymous
    models = {n for m in file.models for n in (m.name, *m.aliases)} | set(file.routing.aliases)
    found = []
    for policy in settings.policies.policies:
        root = _compose(policy)
        for field, known, what in (
            ("tenants", tenants, no_tenant),
            ("models", models, "no model, alias or routing alias has that name"),
        ):
            for i, name in enumerate(getattr(policy.match, field)):
                if name in known or _GLOB_CHARS & set(name):
                    continue
                line = line_of(root, ("match", field, i))
                where = f"match.{field}[{i}]" + (f" (line {line})" if line else "")
                found.append(
                    f"{policy.source}: {where}: {name!r} is unknown ({what}), so this policy "
                    "never applies to it"
                )
    return found


def _compose(policy: Policy) -> yaml.Node | None:
    try:
        return yaml.compose(Path(policy.source).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # changed since it loaded
        return None
