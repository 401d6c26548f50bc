import pytest

from gateway.config import build_settings, parse_config
from gateway.errors import AuthenticationFailed
from gateway.http import auth

BASE = "providers: {demo: {type: demo}}\nmodels: [{name: demo, provider: demo}]\n"
KEYED = build_settings(
    parse_config(BASE + "auth: {keys: [{env: KA, tenant: a}, {env: KB, tenant: b}]}"),
    "<t>",
    {"KA": "key-a", "KB": "key-b", "GATEWAY_ADMIN_KEY": "root"},
)
OPEN = build_settings(parse_config(BASE), "<t>", {})


@pytest.mark.parametrize(("header", "tenant"), [("Bearer key-a", "a"), ("bearer  key-b", "b")])
def test_keys_map_to_tenants(header: str, tenant: str) -> None:
    assert auth.tenant_for(KEYED, header) == tenant


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic key-a", "Bearer key-c", "key-a"])
def test_missing_or_wrong_keys_are_refused(header: str | None) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        auth.tenant_for(KEYED, header)
    assert info.value.status == 401 and "key-a" not in info.value.message


def test_anonymous_mode_accepts_anything() -> None:
    assert auth.tenant_for(OPEN, None) == auth.tenant_for(OPEN, "Bearer x") == "local"


def test_admin_key_is_separate_from_tenant_keys() -> None:
    auth.check_admin(KEYED, "Bearer root")
    with pytest.raises(AuthenticationFailed):
        auth.check_admin(KEYED, "Bearer key-a")
    with pytest.raises(AuthenticationFailed, match="admin API is disabled"):
        auth.check_admin(OPEN, "Bearer root")
