"""One error hierarchy. Each error knows its HTTP status and its OpenAI error body; the HTTP
layer turns it into a response in exactly one place (http/middleware.py)."""

from __future__ import annotations

from typing import Any

# What of a client's input an error message quotes: enough to recognise it, never the whole of
# a 200 KB model name (error bodies are logged, relayed and shown to people).
ECHO_CHARS = 200
# Every message and param, whatever it quotes: the last bound, for a quote no one wrapped.
MAX_MESSAGE_CHARS = 2048
MAX_PARAM_CHARS = 256


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """`value` as an error message quotes it (`repr`, so quotes and control characters show),
    its first `limit` characters only, with the length it had: `'aaaa'… (200000 characters)`.
    Every message that quotes what a client sent quotes it through this."""
    if not isinstance(value, str):
        return clip(repr(value), limit)
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying so."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 40)  # room for the note
    return f"{text[:keep]}… ({len(text) - keep} more characters)"


class GatewayError(Exception):
    status: int = 500
    type: str = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message = clip(message, MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.message = message
        self.param = clip(param, MAX_PARAM_CHARS) if param is not None else None
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class AuthenticationFailed(GatewayError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "invalid_request_error"
    code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UpstreamError(GatewayError):
    """The upstream failed or refused. 4xx keep their status; everything else is 502."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"


class ProviderMisconfigured(UpstreamError):
    """The gateway's own configuration of a provider is wrong: the provider rejects the
    gateway's key, does not know the model a deployment names (or the base_url misses its
    API path), or cannot be reached and never has been since the provider was configured.
    Not an outage: no retry, no breaker, no level-4 answer. The client gets this 502 with the
    fix in its message, and `x-should-retry: false` so the OpenAI SDKs do not retry it."""

    def __init__(self, message: str, *, code: str, provider: str) -> None:
        super().__init__(message, code=code, headers={"x-should-retry": "false"})
        self.provider = provider


class InvalidUpstreamAnswer(UpstreamError):
    """A 200 that is not the answer it claims to be (another content type, not JSON, no
    choices, a choice without its message or delta, an error object...): an upstream failure
    like a 5xx, retried, fallen back from and never cached. `reason` is a bounded label for
    the metrics (gateway_upstream_invalid_answers_total)."""

    code = "upstream_invalid_response"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"

    def __init__(self, message: str, *, blame_upstream: bool = True, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.blame_upstream = blame_upstream  # False: the request's own budget ran out


class InternalError(GatewayError):
    """Anything unexpected. Its message is generic: details go to the log, not the client."""

    status = 500
    type = "api_error"
    code = "internal_error"
