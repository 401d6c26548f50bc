"""Gateway API keys -> tenants, and the admin key. Keys are compared by their SHA-256 only."""

from __future__ import annotations

from gateway.config import Settings, hash_key
from gateway.errors import AuthenticationFailed


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
    tenant = settings.tenant_by_key_hash.get(hash_key(token))
    if tenant is None:
        raise AuthenticationFailed("Incorrect API key provided.")
    return tenant


def check_admin(settings: Settings, authorization: str | None) -> None:
    if settings.admin_key_hash is None:
        raise AuthenticationFailed(
            "The admin API is disabled: set the environment variable named by auth.admin_key_env.",
            code="admin_disabled",
        )
    token = bearer_token(authorization)
    if token is None or hash_key(token) != settings.admin_key_hash:
        raise AuthenticationFailed("Incorrect or missing admin key.")
