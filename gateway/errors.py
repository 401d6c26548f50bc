"""One error hierarchy. Each error knows its HTTP status and its OpenAI error body; the HTTP
layer turns it into a response in exactly one place (http/middleware.py)."""

from __future__ import annotations

from typing import Any


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
        super().__init__(message)
        self.message = message
        self.param = param
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
