"""Error bodies exactly as each provider sends them (status code and JSON)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ErrorResponse",
    "Fault",
    "OverflowFormat",
    "Provider",
    "invalid_request",
    "overflow_error",
    "server_error",
]

OverflowFormat = Literal["openai", "anthropic", "deepseek", "vllm", "llamacpp", "dashscope", "ollama"]
"""Whose context-overflow error the chat-completions endpoint imitates (`ollama`: none, it
silently truncates the prompt to the window)."""

Provider = Literal["openai", "anthropic"]
"""Which API family an endpoint speaks."""

ErrorResponse = tuple[int, Any]
"""HTTP status and JSON body."""


def _requested_wording(window: int, prompt: int, completion: int) -> str:
    return (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the completion). "
        "Please reduce the length of the messages or completion."
    )


def _openai_body(
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> Any:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _anthropic_body(message: str, kind: str = "invalid_request_error") -> Any:
    return {"type": "error", "error": {"type": kind, "message": message}}


def overflow_error(
    fmt: OverflowFormat,
    *,
    window: int,
    prompt: int,
    max_tokens: int | None,
    total: bool,
    request_id: str,
) -> ErrorResponse | None:
    """The provider's answer to a request over the window; None where the provider does not reject (Ollama).

    `total=False`: the prompt alone is over the window; `total=True`: the prompt plus `max_tokens` is.
    """
    completion = max_tokens or 0
    if fmt == "openai":
        message = (
            _requested_wording(window, prompt, completion)
            if total
            else f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {prompt} tokens. Please reduce the length of the messages."
        )
        return 400, _openai_body(message, param="messages", code="context_length_exceeded")
    if fmt == "deepseek":
        message = _requested_wording(window, prompt, completion)
        return 400, _openai_body(message, code="invalid_request_error")
    if fmt == "vllm":
        message = _requested_wording(window, prompt, completion)
        return 400, {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    if fmt == "anthropic":
        message = (
            f"input length and `max_tokens` exceed context limit: {prompt} + {completion} > "
            f"{window}, decrease input length or `max_tokens` and try again"
            if total
            else f"prompt is too long: {prompt} tokens > {window} maximum"
        )
        return 400, _anthropic_body(message)
    if fmt == "llamacpp":
        message = "the request exceeds the available context size, try increasing it"
        error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
        return 400, {"error": error | {"n_prompt_tokens": prompt, "n_ctx": window}}
    if fmt == "dashscope":
        # DashScope states the input range left after reserving the requested output.
        limit = window - completion if total else window
        message = f"Range of input length should be [1, {limit}]"
        return 400, {"code": "InvalidParameter", "message": message, "request_id": request_id}
    return None


def server_error(provider: Provider) -> ErrorResponse:
    """A 500 internal error in the provider's shape."""
    if provider == "anthropic":
        return 500, _anthropic_body("Internal server error", "api_error")
    message = "The server had an error while processing your request. Sorry about that!"
    return 500, _openai_body(message, kind="server_error")


def invalid_request(provider: Provider, message: str, status: int = 400) -> ErrorResponse:
    """A malformed request or unknown route, in the provider's shape."""
    if provider == "anthropic":
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        return status, _anthropic_body(message, kind)
    return status, _openai_body(message)


@dataclass(frozen=True)
class Fault:
    """An error a test queued for the next model call (`FakeLLMServer.fail_next`)."""

    status: int
    """HTTP status code."""
    body: Mapping[str, Any] | str | None
    """The body to send; None: the provider's server error (5xx) or a generic invalid request."""
    headers: Mapping[str, str]
    """Extra response headers."""

    def error(self, provider: Provider) -> ErrorResponse:
        """The status and body, in `provider`'s shape when no body was given."""
        if self.body is not None:
            return self.status, self.body
        if self.status >= 500:
            return self.status, server_error(provider)[1]
        return invalid_request(provider, f"injected fault {self.status}", self.status)
