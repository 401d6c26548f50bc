"""Policies: overlays on config.yaml, chosen per request by tenant and model.

Precedence (docs/POLICIES.md). A policy matches a request when one of its tenant patterns
matches the tenant and one of its model patterns the model. Each side scores how specifically
it matched: 2 for an exact name, 1 for a glob, 0 for `*`. Matching policies apply from the
least to the most specific, ranked by the tenant's score first and the model's second, so the
most specific policy wins every field it sets; fields nobody sets come from config.yaml.

Two policies of the same rank that match one request and set the same field are a tie: an
error when the policies load (and so in `gateway check` and on reload). Ties are looked for
among every tenant and model config.yaml names plus an example name for every pattern.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from gateway.config.base import Strict
from gateway.config.cache import CachePolicy, CachePolicyOverride
from gateway.config.degradation import DegradationConfig
from gateway.config.file import ConfigFile
from gateway.config.guard import GuardConfig
from gateway.config.policy_file import (
    NO_KNOWLEDGE_BASE,
    RENAMED_SECTIONS,
    SECTIONS,
    TENANT_SECTIONS,
    ByokConfig,
    KnowledgePolicy,
    MetricsPolicy,
    OverloadConfig,
    PolicyMatch,
    PolicyRouting,
)
from gateway.config.rate_limits import RateLimitConfig
from gateway.config.responses import StorageQuotaConfig
from gateway.config.routing import RoutingConfig
from gateway.config.suggest import did_you_mean
from gateway.util.merge import deep_merge

log = logging.getLogger("gateway.policies")
Json = dict[str, Any]
CONFIG_FILE = "config.yaml"  # how `origin` names a field nobody overrode
_GLOB = re.compile(r"[*?\[]")
_MEMO_LIMIT = 10_000


class PolicyProblem(ValueError):
    """A policy that cannot be used: `where` names the field (and the file's line, if known)."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


def specificity(pattern: str, name: str) -> int | None:
    """2: the exact name, 1: a glob matching it, 0: `*`; None when it does not match."""
    if pattern == "*":
        return 0
    if _GLOB.search(pattern) is None:
        return 2 if pattern == name else None
    return 1 if fnmatchcase(name, pattern) else None


def _best(patterns: list[str], name: str) -> tuple[int, str] | None:
    scored = [(s, p) for p in patterns if (s := specificity(p, name)) is not None]
    return max(scored, default=None)


@dataclass(frozen=True, slots=True)
class Policy:
    """One loaded policy file: its match and the sections exactly as written."""

    name: str
    source: str
    match: PolicyMatch
    overlay: Mapping[str, Json]
    description: str | None = None
    fields: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        leaves = {path for section, body in self.overlay.items() for path in _leaves(section, body)}
        object.__setattr__(self, "fields", frozenset(leaves))

    def applies(self, tenant: str, model: str) -> Applied | None:
        by_tenant = _best(self.match.tenants, tenant)
        by_model = _best(self.match.models, model)
        if by_tenant is None or by_model is None:
            return None
        return Applied(self, (by_tenant[0], by_model[0]), by_tenant[1], by_model[1])


@dataclass(frozen=True, slots=True)
class Applied:
    policy: Policy
    rank: tuple[int, int]  # (tenant specificity, model specificity)
    tenant_pattern: str
    model_pattern: str

    def why(self) -> str:
        def side(kind: str, pattern: str, score: int) -> str:
            how = ("any " + kind, f"{kind} glob {pattern!r}", f"{kind} {pattern!r} exactly")
            return how[score]

        return (
            f"{side('tenant', self.tenant_pattern, self.rank[0])}, "
            f"{side('model', self.model_pattern, self.rank[1])}"
        )


@dataclass(frozen=True, slots=True)
class Resolved:
    """What applies to one tenant asking for one model: every section, effective."""

    tenant: str
    model: str
    applied: tuple[Applied, ...]  # least specific first
    origin: Mapping[str, str]  # overridden field path -> the policy that set it
    cache: CachePolicyOverride
    routing: RoutingConfig
    guard: GuardConfig
    knowledge_base: KnowledgePolicy
    degradation: DegradationConfig
    rate_limits: RateLimitConfig
    byok: ByokConfig
    storage: StorageQuotaConfig
    overload: OverloadConfig
    metrics: MetricsPolicy
    _cache_changes: Json = field(default_factory=dict, repr=False)
    _cache_memo: dict[int, tuple[CachePolicy, CachePolicy]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def cache_for(self, base: CachePolicy) -> CachePolicy:
        """The model's cache policy with this request's overrides (made once per model)."""
        changes = self._cache_changes
        if not changes:
            return base
        found = self._cache_memo.get(id(base))
        if found is None or found[0] is not base:
            found = self._cache_memo[id(base)] = (base, base.with_changes(changes))
        return found[1]

    def explain(self) -> Json:
        return {
            "tenant": self.tenant,
            "model": self.model,
            "policies": [
                {
                    "name": a.policy.name,
                    "source": a.policy.source,
                    "rank": list(a.rank),
                    "why": a.why(),
                    "sets": sorted(a.policy.fields),
                }
                for a in reversed(self.applied)  # the winner first
            ],
            "origin": dict(sorted(self.origin.items())),
        }


class Request(Protocol):
    """What resolution needs of a request (gateway.context.RequestContext has it)."""

    policy: Resolved | None
    tenant: str | None
    requested_model: str | None


class PolicySet:
    """The loaded policies of one config, and the resolution of (tenant, model) pairs."""

    def __init__(self, file: ConfigFile, policies: Iterable[Policy] = ()) -> None:
        self.file = file
        self.policies = tuple(sorted(policies, key=lambda p: p.name))
        self._defaults = {
            "routing": file.routing,
            "guard": file.guard,
            "degradation": file.degradation,
        }
        self._memo: dict[tuple[str, str], Resolved] = {}

    def resolve(self, tenant: str, model: str) -> Resolved:
        """The policy of a request (memoized; `model` "" for what depends on the tenant only)."""
        key = (tenant, model)
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            applied = self.matching(tenant, model)
            try:
                found = self.build(tenant, model, applied)
            except PolicyProblem as err:  # a combination no example name showed at load
                log.error("policies for tenant %r, model %r do not combine: %s", tenant, model, err)
                found = self.build(tenant, model, ())
            self._memo[key] = found
        return found

    def of(self, ctx: Request) -> Resolved:
        """The request's policy, resolved once and kept on it."""
        if ctx.policy is None:
            ctx.policy = self.resolve(ctx.tenant or "", ctx.requested_model or "")
        return ctx.policy

    def for_tenant(self, tenant: str) -> Resolved:
        return self.resolve(tenant, "")

    def matching(self, tenant: str, model: str) -> tuple[Applied, ...]:
        applied = [a for p in self.policies if (a := p.applies(tenant, model)) is not None]
        return tuple(sorted(applied, key=lambda a: a.rank))

    def build(self, tenant: str, model: str, applied: tuple[Applied, ...]) -> Resolved:
        origin: dict[str, str] = {}
        merged: dict[str, Json] = {}
        for a in applied:
            for section, body in a.policy.overlay.items():
                merged[section] = deep_merge(merged.get(section, {}), body)
            origin.update(dict.fromkeys(a.policy.fields, a.policy.name))
        sections = {name: self._section(name, tenant, merged.get(name)) for name in SECTIONS}
        routing = sections.pop("routing")
        assert isinstance(routing, PolicyRouting)
        if "routing" in merged:
            routing_config = RoutingConfig(
                aliases=routing.aliases, scoring=self.file.routing.scoring
            )
        else:
            routing_config = self.file.routing
        cache_changes = sections["cache"].model_dump(exclude_none=True)
        return Resolved(
            tenant,
            model,
            applied,
            origin,
            routing=routing_config,
            _cache_changes=cache_changes,
            **sections,  # type: ignore[arg-type]
        )

    def _section(self, name: str, tenant: str, overlay: Json | None) -> Strict:
        default = self._default(name, tenant)
        if overlay is None:
            return default
        merged = deep_merge(default.model_dump(exclude_unset=name == "cache"), overlay)
        try:
            return SECTIONS[name].model_validate(merged)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in (name, *first["loc"]))
            raise PolicyProblem(where, _message(first, SECTIONS[name])) from None

    def _default(self, name: str, tenant: str) -> Strict:
        if name == "routing":
            return PolicyRouting(aliases=self.file.routing.aliases)
        if name == "rate_limits":
            return self.file.rate_limits.for_tenant(tenant)
        if name == "storage":
            return self.file.responses.quotas.of(tenant)
        if name in self._defaults:
            return self._defaults[name]
        return SECTIONS[name]()

    def check(self) -> list[str]:
        """Problems of the set as a whole: ties, and what does not validate once policies
        combine (or once a rate limit meets a tenant's own limits). Every tenant and model
        config.yaml names is tried, and an example name for each pattern."""
        problems: dict[tuple[object, ...], str] = {}  # one report per problem, not per name
        built: set[tuple[str, tuple[str, ...]]] = set()
        for tenant in sorted(self._example_tenants()):
            for model in sorted(self._example_models()):
                applied = self.matching(tenant, model)
                for a, b, shared in _ties(applied):
                    problems.setdefault((a, b, shared), _tie_message(a, b, shared, tenant, model))
                dependent = any("rate_limits" in a.policy.overlay for a in applied)
                if len(applied) < 2 and not dependent:
                    continue  # a policy alone was checked when it loaded
                key = (tenant if dependent else "", _names(applied))
                if key in built:
                    continue
                built.add(key)
                try:
                    resolved = self.build(tenant, model, applied)
                    _check_references(resolved, _sections(applied), self.file)
                except PolicyProblem as err:
                    sources = " and ".join(a.policy.source for a in applied)
                    together = " together" if len(applied) > 1 else ""
                    target = f"tenant {tenant!r}" + (f", model {model!r}" if model else "")
                    problems.setdefault(
                        (key[1], str(err)), f"{sources}{together}, for {target}: {err}"
                    )
        return list(problems.values())

    def _example_tenants(self) -> set[str]:
        file = self.file
        names = {file.auth.anonymous_tenant, *(k.tenant for k in file.auth.keys)}
        names |= set(file.rate_limits.tenants)
        names |= {t for kb in file.knowledge_bases.values() for t in kb.attach.tenants}
        names |= {t for a in file.routing.aliases.values() for t in a.escalate.tenants}
        return names | _examples(p.match.tenants for p in self.policies)

    def _example_models(self) -> set[str]:
        names = {n for m in self.file.models for n in (m.name, *m.aliases)}
        names |= set(self.file.routing.aliases) | {""}
        return names | _examples(p.match.models for p in self.policies)


def _ties(applied: tuple[Applied, ...]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(policy, policy, fields both set) for equally specific policies of one request."""
    found = []
    for i, a in enumerate(applied):
        for b in applied[i + 1 :]:
            shared = tuple(sorted(a.policy.fields & b.policy.fields))
            if a.rank == b.rank and shared:
                found.append((a.policy.source, b.policy.source, shared))
    return found


def _tie_message(a: str, b: str, shared: tuple[str, ...], tenant: str, model: str) -> str:
    return (
        f"tie: {a} and {b} are equally specific (e.g. for tenant {tenant!r}, model "
        f"{model!r}) and both set {', '.join(shared)}; make one more specific or set the "
        "field in only one of them"
    )


def _sections(applied: tuple[Applied, ...]) -> dict[str, Json]:
    return {section: {} for a in applied for section in a.policy.overlay}


def _names(applied: tuple[Applied, ...]) -> tuple[str, ...]:
    return tuple(a.policy.name for a in applied)


def _examples(pattern_lists: Iterable[list[str]]) -> set[str]:
    """For each pattern, a name it matches: itself if exact, else the glob with `*` empty,
    `?` an x and a bracket its first character."""
    out = set()
    for patterns in pattern_lists:
        for pattern in patterns:
            example = re.sub(r"\[!?(.)[^\]]*\]", r"\1", pattern)
            out.add(example.replace("*", "").replace("?", "x"))
    return out


def _leaves(prefix: str, value: Any) -> Iterable[str]:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _leaves(f"{prefix}.{key}", child)
    else:
        yield prefix


def validate_policy(name: str, source: str, data: Any, file: ConfigFile) -> Policy:
    """A policy file's data (parsed YAML) checked against config.yaml, or PolicyProblem."""
    if data is None:
        raise PolicyProblem(
            "",
            "the file is empty; a policy needs `match:` and the sections it sets (to turn "
            "a policy off, move its file out of the directory)",
        )
    if not isinstance(data, dict):
        raise PolicyProblem("", "a policy is a mapping with `match:` and the sections it sets")
    data = _renamed(name, data)
    allowed = {"description", "match", *SECTIONS}
    unknown = sorted(set(data) - allowed)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(allowed), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PolicyProblem(
            unknown[0], f"not a policy field; {hint}allowed: {', '.join(sorted(allowed))}"
        )
    try:
        match = PolicyMatch.model_validate(data.get("match") or {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in ("match", *first["loc"]))
        raise PolicyProblem(where, _message(first, PolicyMatch)) from None
    overlay = {}
    for section in SECTIONS:
        if section not in data:
            continue
        body = data[section]
        if not isinstance(body, dict):
            raise PolicyProblem(section, "must be a mapping")
        overlay[section] = body
    description = data.get("description")
    policy = Policy(
        name, source, match, overlay, description if isinstance(description, str) else None
    )
    scoped = sorted(TENANT_SECTIONS & set(overlay))
    if scoped and match.models != ["*"]:
        verb = "applies" if len(scoped) == 1 else "apply"
        raise PolicyProblem(
            "match.models",
            f"{' and '.join(scoped)} {verb} per tenant (decided before the request is read), "
            "so a policy that sets it cannot narrow models",
        )
    # Against config.yaml's defaults; each tenant's own rate limits: PolicySet.check().
    alone = PolicySet(file, [policy])
    resolved = alone.build("", "", (Applied(policy, (0, 0), "*", "*"),))
    _check_references(resolved, overlay, file)
    return policy


def _renamed(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with old section names under their new ones; an old name still loads (with a
    warning that names the new one) unless the file gives both."""
    out = dict(data)
    for old, new in RENAMED_SECTIONS.items():
        if old not in out:
            continue
        if new in out:
            raise PolicyProblem(old, f"is the old name of `{new}`, which this file also sets")
        log.warning("policy %s: `%s` is now called `%s`; please rename it", name, old, new)
        out[new] = out.pop(old)
    return out


def _message(error: Any, model: type[BaseModel]) -> str:
    """A validation error's message; for an unknown field, the allowed name nearest it."""
    hint = did_you_mean(model, error["loc"]) if error["type"] == "extra_forbidden" else ""
    return str(error["msg"]).removeprefix("Value error, ") + hint


def _check_references(resolved: Resolved, overlay: Mapping[str, Json], file: ConfigFile) -> None:
    chat = {n for m in file.models if m.kind == "chat" for n in (m.name, *m.aliases)}
    if "routing" in overlay:
        for alias in overlay["routing"].get("aliases", {}):
            if alias not in file.routing.aliases:
                raise PolicyProblem(
                    f"routing.aliases.{alias}",
                    "not an alias of config.yaml; policies change aliases, config.yaml "
                    f"defines them (defined: {', '.join(sorted(file.routing.aliases)) or 'none'})",
                )
        for alias, config in resolved.routing.aliases.items():
            for n, tier in enumerate(config.tiers):
                if tier.model not in chat:
                    raise PolicyProblem(
                        f"routing.aliases.{alias}.tiers.{n}.model",
                        f"{tier.model!r} is not a configured chat model",
                    )
    summarizer = resolved.guard.compression.summarizer_model
    if "guard" in overlay and summarizer is not None and summarizer not in chat:
        raise PolicyProblem(
            "guard.compression.summarizer_model", f"{summarizer!r} is not a configured chat model"
        )
    base = resolved.knowledge_base.base
    if base is not None and base != NO_KNOWLEDGE_BASE and base not in file.knowledge_bases:
        known = ", ".join(sorted(file.knowledge_bases)) or "none configured"
        raise PolicyProblem(
            "knowledge_base.base", f"unknown knowledge base {base!r} ({known}; or 'none')"
        )
    rule = resolved.knowledge_base
    if rule.min_chunks is not None:
        named = [base] if base is not None and base != NO_KNOWLEDGE_BASE else []
        for name in named or list(file.knowledge_bases):
            top_k = file.knowledge_bases[name].top_k
            if rule.min_chunks > top_k:
                raise PolicyProblem(
                    "knowledge_base.min_chunks",
                    f"{rule.min_chunks} is more than knowledge base {name!r} retrieves "
                    f"(top_k {top_k}): no answer could be grounded",
                )
    byok = resolved.byok
    if byok.enabled and not byok.providers:
        raise PolicyProblem("byok.providers", "name the providers the caller's key is for")
    for n, provider in enumerate(byok.providers):
        provider_config = file.providers.get(provider)
        if provider_config is None or provider_config.type != "openai":
            raise PolicyProblem(
                f"byok.providers.{n}", f"{provider!r} is not an 'openai' provider of config.yaml"
            )
