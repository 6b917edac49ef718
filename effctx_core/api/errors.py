"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the
status codes the `openai` SDK turns into its exception classes."""

from __future__ import annotations

from dataclasses import dataclass, field

from effctx_core.errors import ContextOverflowError


@dataclass
class ApiError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def __str__(self) -> str:
        return self.message


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", param, code)


def context_exceeded(exc: ContextOverflowError) -> ApiError:
    # llama-server's wording and numbers, in OpenAI's code, which clients check to trim history.
    return ApiError(
        400, f"the request ({exc.additional} prompt tokens) exceeds the available context size "
        f"({exc.n_ctx} tokens), try increasing it with --n-ctx", "invalid_request_error", "messages",
        "context_length_exceeded")


def queue_full(queued: int, retry_after: int) -> ApiError:
    return ApiError(429, f"the server is busy: {queued} requests are waiting; retry in {retry_after} s",
                    "rate_limit_error", None, "rate_limit_exceeded", {"Retry-After": str(retry_after)})


def loading(detail: str) -> ApiError:
    return ApiError(503, f"the model is loading ({detail}); retry in a moment", "unavailable_error", None,
                    "model_loading", {"Retry-After": "1"})


def unavailable(reason: str) -> ApiError:
    return ApiError(503, reason, "unavailable_error", None, "unavailable")


def server_error(reason: str) -> ApiError:
    return ApiError(500, reason, "server_error", None, "server_error")


def unauthorized() -> ApiError:
    return ApiError(401, "invalid or missing API key (send it as Authorization: Bearer KEY)",
                    "authentication_error", None, "invalid_api_key")


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is over the limit of {limit} bytes", "invalid_request_error", None,
                    "request_too_large")


def too_slow(seconds: float) -> ApiError:
    return ApiError(408, f"the request body did not arrive in time (no data for {seconds:g} s)",
                    "invalid_request_error", None, "request_timeout")
