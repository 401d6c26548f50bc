"""Map what an upstream says (an HTTP status and body, or a network failure) to GatewayErrors.

The rules, in one place: the client's mistakes (4xx) keep their status and the upstream's
message; 429 keeps its Retry-After; 5xx and network failures are 502, timeouts 504. Faults of
the gateway's own configuration are `ProviderMisconfigured` (502, no retry, the fix in the
message): the provider rejects the configured key (401/403; with the caller's own provider key,
bring your own key, that is the caller's 401 instead), does not know the deployment's model or
path (404, or a 400 that says the model does not exist), or cannot be connected to and has
never answered. Messages never carry provider keys or HTML.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from gateway.errors import (
    GatewayError,
    InvalidUpstreamAnswer,
    ProviderMisconfigured,
    UpstreamError,
    UpstreamTimeout,
)

_MAX_MESSAGE = 500
# How providers say a model does not exist: OpenAI's code, and the words of vLLM, Ollama,
# DeepSeek ("Model Not Exist"), LiteLLM-style proxies and others, in 400s and 404s alike.
_UNKNOWN_MODEL = re.compile(
    r"\bmodel\b.{0,80}\b(not exist|does not exist|not found)\b|\b(unknown|invalid|no such) model\b",
    re.IGNORECASE | re.DOTALL,
)


def from_response(
    provider: str,
    status: int,
    raw: bytes,
    headers: Mapping[str, str],
    secrets: list[str],
    *,
    callers_key: bool = False,
    model: str | None = None,
    key_env: str | None = None,
) -> GatewayError:
    """`model`: the model the request named upstream; `key_env`: the variable holding the
    configured key. Both go into the fix a configuration fault's message gives."""
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
        where = f"the key in {key_env}" if key_env else "its api_key_env"
        return ProviderMisconfigured(
            f"provider '{provider}' rejected the gateway's key (HTTP {status}): check {where} "
            f"(providers.{provider}.api_key_env)",
            code="upstream_auth_failed",
            provider=provider,
        )
    if status == 404 or (status == 400 and _names_unknown_model(code, message)):
        return _unknown_model(provider, status, model, code, message)
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


def _names_unknown_model(code: str | None, message: str | None) -> bool:
    return code == "model_not_found" or bool(message and _UNKNOWN_MODEL.search(message))


def _unknown_model(
    provider: str, status: int, model: str | None, code: str | None, message: str | None
) -> ProviderMisconfigured:
    said = f": {message}" if message else ""
    if _names_unknown_model(code, message) or status == 400:
        return ProviderMisconfigured(
            f"provider '{provider}' does not know the model {model!r} (HTTP {status}{said}): "
            "check the model a deployment of config.yaml's models names for it",
            code="upstream_model_unknown",
            provider=provider,
        )
    return ProviderMisconfigured(
        f"provider '{provider}' answered HTTP 404 for model {model!r}{said}: check "
        f"providers.{provider}.base_url (an OpenAI-compatible one usually ends in /v1) and the "
        "deployment's model",
        code="upstream_not_found",
        provider=provider,
    )


@contextmanager
def network_errors(
    provider: str, *, base_url: str | None = None, never_answered: bool = False
) -> Iterator[None]:
    """Turn aiohttp/asyncio failures into 502/504 GatewayErrors. A provider that cannot be
    connected to and has `never_answered` is a configuration fault (a wrong host or port),
    not an outage."""
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
    except aiohttp.ClientConnectorError as exc:
        if never_answered:
            raise ProviderMisconfigured(
                f"cannot connect to provider '{provider}' at {_address(base_url)} "
                f"({_reason(exc)}), and it has not answered since it was configured: check "
                f"providers.{provider}.base_url",
                code="upstream_unreachable",
                provider=provider,
            ) from None
        raise UpstreamError(
            f"cannot connect to provider '{provider}'", code="upstream_unreachable"
        ) from None
    except aiohttp.ClientError as exc:
        raise UpstreamError(
            f"connection to provider '{provider}' failed ({type(exc).__name__})"
        ) from None


def _address(base_url: str | None) -> str:
    """host:port of a base URL, without credentials or path (messages are shown and logged)."""
    parts = urlsplit(base_url or "")
    if not parts.hostname:
        return "its base_url"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def _reason(exc: aiohttp.ClientConnectorError) -> str:
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "the host name does not resolve"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "its TLS certificate is not accepted"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return "the TLS handshake failed: is it http rather than https?"
    error = exc.os_error
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"  # asyncio's strerror reads "Connect call failed (...)"
    return (os.strerror(error.errno) if error.errno else type(error).__name__).lower()


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
