"""Gateway API keys -> tenants, the admin key, and callers' own provider keys. Keys are
compared by their SHA-256 only, in constant time."""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping

from pydantic import SecretStr

from gateway.config import Settings, hash_key
from gateway.config.policy_file import ByokConfig
from gateway.context import RequestContext
from gateway.errors import AuthenticationFailed, InvalidRequest, PermissionDenied

PROVIDER_KEY_HEADER = "x-gateway-provider-key"
_PROVIDER_KEY = re.compile(r"[\x21-\x7e]{8,512}")  # printable ASCII, no spaces


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def tenant_for(settings: Settings, authorization: str | None) -> str:
    """The caller's tenant. With no keys configured every caller is the anonymous tenant."""
    if settings.anonymous:
        return settings.file.auth.anonymous_tenant
    token = bearer_token(authorization)
    if token is None:
        raise AuthenticationFailed(
            "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
        )
    tenant = _tenant_of(hash_key(token), settings.tenant_by_key_hash)
    if tenant is None:
        raise AuthenticationFailed("Incorrect API key provided.")
    return tenant


def check_metrics(settings: Settings, authorization: str | None) -> None:
    """/metrics is open unless auth.metrics_key_env names a key (then it needs that key, or
    the admin key)."""
    if settings.metrics_key_hash is None:
        return
    digest = _digest(authorization)
    known = (settings.metrics_key_hash, settings.admin_key_hash)
    if digest is None or not any(_same(digest, k) for k in known if k is not None):
        raise AuthenticationFailed("Incorrect or missing metrics key.")


def check_admin(settings: Settings, authorization: str | None) -> None:
    if settings.admin_key_hash is None:
        raise AuthenticationFailed(
            "The admin API is disabled: set the environment variable named by auth.admin_key_env.",
            code="admin_disabled",
        )
    digest = _digest(authorization)
    if digest is None or not _same(digest, settings.admin_key_hash):
        raise AuthenticationFailed("Incorrect or missing admin key.")


def _same(digest: str, known: str) -> bool:
    return hmac.compare_digest(digest.encode(), known.encode())


def _tenant_of(digest: str, tenants: Mapping[str, str]) -> str | None:
    """The tenant whose key has `digest`: every key compared in constant time, and all of them
    (no early exit), so the time taken says nothing about which digest came close."""
    found = None
    for known, tenant in tenants.items():
        if _same(digest, known):
            found = tenant
    return found


def _digest(authorization: str | None) -> str | None:
    """The SHA-256 of the bearer token presented, if any: keys are only compared as digests."""
    token = bearer_token(authorization)
    return hash_key(token) if token else None


def bring_own_key(ctx: RequestContext, byok: ByokConfig, given: str | None) -> None:
    """Take the caller's own provider key (header x-gateway-provider-key) when its policy
    allows it. The key lives on the request only; everything that outlasts the request (cache
    scope, rate limits, cost) sees a one-way hash of it."""
    if given is None:
        return
    if not byok.enabled:
        raise PermissionDenied(
            f"This tenant may not send its own provider key ({PROVIDER_KEY_HEADER}); "
            "a policy with byok.enabled allows it.",
            code="byok_not_allowed",
        )
    if _PROVIDER_KEY.fullmatch(given) is None:  # never echo the value
        raise InvalidRequest(
            f"Header {PROVIDER_KEY_HEADER} must be a provider key: 8 to 512 printable "
            "characters without spaces.",
            code="invalid_header",
        )
    ctx.byok_key = SecretStr(given)
    ctx.byok_hash = hash_key(given)[:16]
    ctx.byok_providers = tuple(byok.providers)
