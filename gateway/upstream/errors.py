"""Map what an upstream says (an HTTP status and body, or a network failure) to GatewayErrors.

The rules, in one place: the client's mistakes (4xx) keep their status and the upstream's
message; 429 keeps its Retry-After; the gateway's own credential problem (401/403 from the
upstream) is a 502, because the caller's key was fine, unless the key was the caller's own
provider key (bring your own key): then it is the caller's 401; 5xx and network failures are 502,
timeouts 504. Messages never carry provider keys or HTML.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import aiohttp
import orjson

from gateway.errors import GatewayError, InvalidUpstreamAnswer, UpstreamError, UpstreamTimeout

_MAX_MESSAGE = 500


def from_response(
    provider: str,
    status: int,
    raw: bytes,
    headers: Mapping[str, str],
    secrets: list[str],
    *,
    callers_key: bool = False,
) -> GatewayError:
    message, type_, code, param = _error_fields(raw, secrets)
    if status == 429:
        retry_after = headers.get("Retry-After")
        return GatewayError(
            message or f"provider '{provider}' is rate limiting requests",
            status=429,
            type=type_ or "rate_limit_error",
            code=code or "rate_limit_exceeded",
            headers={"Retry-After": retry_after} if retry_after else None,
        )
    if status in (401, 403) and callers_key:
        return GatewayError(
            f"provider '{provider}' rejected the key sent in x-gateway-provider-key "
            f"(HTTP {status})",
            status=401,
            type="invalid_request_error",
            code="provider_key_rejected",
        )
    if status in (401, 403):
        return UpstreamError(
            f"provider '{provider}' rejected the gateway's credentials (HTTP {status}); "
            "check its api_key_env",
            code="upstream_auth_failed",
        )
    if status in (408, 504):
        return UpstreamTimeout(f"provider '{provider}' timed out (HTTP {status})")
    if 400 <= status < 500:
        return GatewayError(
            message or f"provider '{provider}' rejected the request (HTTP {status})",
            status=status,
            type=type_ or "invalid_request_error",
            code=code,
            param=param,
        )
    detail = f": {message}" if message else ""
    return UpstreamError(f"provider '{provider}' failed with HTTP {status}{detail}")


def from_stream_event(provider: str, raw: bytes, secrets: list[str]) -> GatewayError:
    """An `{"error": ...}` event inside a stream that had already started."""
    message = _error_fields(raw, secrets)[0]
    detail = f": {message}" if message else ""
    return UpstreamError(f"provider '{provider}' reported an error mid-stream{detail}")


def error_in_200(provider: str, data: dict[str, Any], secrets: list[str]) -> GatewayError:
    """An error body answered with status 200: the upstream failed, whatever the status said."""
    message = _error_fields(orjson.dumps(data), secrets)[0]
    detail = f": {message}" if message else ""
    return InvalidUpstreamAnswer(
        f"provider '{provider}' answered 200 with an error{detail}", "error_object"
    )


@contextmanager
def network_errors(provider: str) -> Iterator[None]:
    """Turn aiohttp/asyncio failures into 502/504 GatewayErrors."""
    try:
        yield
    except TimeoutError:  # aiohttp's timeouts subclass it
        raise UpstreamTimeout(f"provider '{provider}' did not answer in time") from None
    except UnicodeDecodeError:
        raise InvalidUpstreamAnswer(
            f"provider '{provider}' sent a stream that is not UTF-8", "not_json"
        ) from None
    except aiohttp.ClientPayloadError:
        raise UpstreamError(f"provider '{provider}' broke off its response") from None
    except aiohttp.ClientConnectorError:
        raise UpstreamError(
            f"cannot connect to provider '{provider}'", code="upstream_unreachable"
        ) from None
    except aiohttp.ClientError as exc:
        raise UpstreamError(
            f"connection to provider '{provider}' failed ({type(exc).__name__})"
        ) from None


def parse_json(provider: str, raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidUpstreamAnswer(
            f"provider '{provider}' returned a response that is not JSON", "not_json"
        ) from None
    if not isinstance(data, dict):
        raise InvalidUpstreamAnswer(
            f"provider '{provider}' returned JSON that is not an object", "not_json"
        )
    return data


def scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _error_fields(
    raw: bytes, secrets: list[str]
) -> tuple[str | None, str | None, str | None, str | None]:
    """message, type, code and param of an upstream error body, each scrubbed of secrets and
    cut short (the client sees them; `code` also reaches the access log)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, None, None, None  # HTML or text: never shown to the client
    if not isinstance(data, dict):
        return None, None, None, None
    err = data.get("error", data)
    if isinstance(err, str):
        return scrub(err, secrets)[:_MAX_MESSAGE], None, None, None
    if not isinstance(err, dict):
        return None, None, None, None

    def text(key: str) -> str | None:
        value = err.get(key)
        return scrub(str(value), secrets)[:_MAX_MESSAGE] if value not in (None, "") else None

    return text("message") or text("detail"), text("type"), text("code"), text("param")
