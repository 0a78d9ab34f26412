"""The fake LLM server: OpenAI, Anthropic and Ollama endpoints over real HTTP, with a real window."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, NamedTuple, Self, get_args

from contextkeep._errors import ConfigError
from contextkeep._tokens.encoders import Encoder
from contextkeep.testing._errors import (
    Fault,
    OverflowFormat,
    Provider,
    invalid_request,
    overflow_error,
    server_error,
)
from contextkeep.testing._held_responses import HeldResponses
from contextkeep.testing._http import HTTPResponse, ThreadedServer
from contextkeep.testing._render import (
    anthropic_events,
    anthropic_message,
    model_list,
    ollama_show,
    openai_chunks,
    openai_completion,
)
from contextkeep.testing._replies import (
    Completion,
    Reply,
    Responder,
    UsageMode,
    default_responder,
)
from contextkeep.testing._responses import chat_view
from contextkeep.testing._summary import (
    DEFAULT_SUMMARY_MARKER,
    SummaryFailure,
    SummaryResponder,
    broken_summary,
    is_summary_request,
    summary_reply,
)
from contextkeep.testing._tokens import count_output, default_counter, truncate_output

__all__ = ["Counter", "FakeLLMServer", "RecordedRequest"]

Counter = Callable[[Mapping[str, Any]], int]
"""Prompt tokens of a request, given its parsed body."""

# How often the serving loop checks for stop(); it bounds how long stop() takes.
_POLL_SECONDS = 0.02

# llama.cpp and Ollama stop generating at the window instead of rejecting a large max_tokens.
_NO_TOTAL_CHECK = frozenset({"llamacpp", "ollama"})


class RecordedRequest(NamedTuple):
    """One request the server received."""

    path: str
    """URL path, e.g. ``/v1/chat/completions``."""
    body: Any
    """Parsed JSON body; None when there was none (GET), the text when it was not JSON."""
    headers: Mapping[str, str]
    """Request headers, names lower-cased."""


def _check_choice(key: str, value: Any, allowed: Any) -> None:
    if value not in get_args(allowed):
        raise ConfigError(key, f"{value!r} is not one of {', '.join(get_args(allowed))}")


class FakeLLMServer:
    """A deterministic LLM server on 127.0.0.1 for tests, spoken to with the real SDKs.

    Use as ``with FakeLLMServer(...) as srv:`` or with `start()`/`stop()`. Every setting below
    is a plain attribute a test may change between calls.
    """

    model: str
    """Model served by `/v1/models` and `/api/show`; echoed when a request names none."""
    context_window: int
    """Tokens the model accepts, prompt plus output."""
    counter: Counter
    """Counts a request's prompt tokens (default: tiktoken ``o200k_base``)."""
    overflow_format: OverflowFormat
    """Whose overflow error `/v1/chat/completions` sends; `/v1/messages` always speaks Anthropic."""
    enforce_max_tokens: bool | None
    """Reject prompt + max_tokens over the window; None: as the provider does (not llama.cpp/Ollama)."""
    usage_mode: UsageMode
    """Which usage fields responses carry."""
    responder: Responder
    """Answers normal requests once the scripted replies run out."""
    summary_marker: str
    """Marks a summary request when found in a system message or the last user message."""
    summary_responder: SummaryResponder | None
    """Answers summary requests; None: the deterministic five-field JSON summary."""
    summary_failure: SummaryFailure | None
    """How every summary request fails, unless `fail_next_summaries` queued a failure."""
    timeout_seconds: float
    """How long a `timeout` summary failure stalls before answering."""
    architecture: str
    """Architecture named by `/api/show` (``<architecture>.context_length``)."""
    encoder: Encoder | None
    """Counts reply tokens (default: tiktoken ``o200k_base``); pass one to run fully offline."""
    delay_seconds: float
    """How long every model call waits before it is answered (a slow upstream; `stop()` cuts it short)."""
    messages_api: bool
    """Whether `/v1/messages` is served; False: a chat-only server, which answers it 404."""
    responses_api: bool
    """Whether `/v1/responses` is served (with `previous_response_id` held here); False: answered 404."""

    def __init__(
        self,
        *,
        model: str = "fake-model",
        context_window: int = 8192,
        counter: Counter = default_counter,
        overflow_format: OverflowFormat = "openai",
        enforce_max_tokens: bool | None = None,
        usage_mode: UsageMode = "full",
        replies: Iterable[Reply | str] = (),
        responder: Responder = default_responder,
        summary_marker: str = DEFAULT_SUMMARY_MARKER,
        summary_responder: SummaryResponder | None = None,
        summary_failure: SummaryFailure | None = None,
        timeout_seconds: float = 5.0,
        architecture: str = "llama",
        encoder: Encoder | None = None,
        delay_seconds: float = 0.0,
        messages_api: bool = True,
        responses_api: bool = False,
    ) -> None:
        if context_window <= 0:
            raise ConfigError("context_window", "must be positive")
        _check_choice("overflow_format", overflow_format, OverflowFormat)
        _check_choice("usage_mode", usage_mode, UsageMode)
        if summary_failure is not None:
            _check_choice("summary_failure", summary_failure, SummaryFailure)
        self.model, self.context_window, self.counter = model, context_window, counter
        self.encoder = encoder
        self.overflow_format, self.enforce_max_tokens = overflow_format, enforce_max_tokens
        self.usage_mode, self.responder = usage_mode, responder
        self.summary_marker, self.summary_responder = summary_marker, summary_responder
        self.summary_failure, self.timeout_seconds = summary_failure, timeout_seconds
        self.architecture, self.delay_seconds = architecture, delay_seconds
        self.messages_api, self.responses_api = messages_api, responses_api
        self._held = HeldResponses()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._http: ThreadedServer | None = None
        self._thread: threading.Thread | None = None
        self._requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque()
        self._faults: deque[Fault] = deque()
        self._summary_faults: deque[SummaryFailure] = deque()
        self._responses = self._tool_calls = 0
        self.enqueue(*replies)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        """Listen on an ephemeral port in a daemon thread; a no-op when already running."""
        if self._http is None:
            self._stopping.clear()
            self._http = ThreadedServer(self._handle)
            self._thread = threading.Thread(
                target=self._http.serve_forever,
                args=(_POLL_SECONDS,),
                name="contextkeep-fake-llm",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end stalled answers and open connections."""
        if self._http is None:
            return
        self._stopping.set()
        self._http.shutdown()
        self._http.close_connections()
        self._http.server_close()
        if self._thread is not None:
            self._thread.join()
        self._http = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:54321`` (Ollama clients use this)."""
        if self._http is None:
            raise RuntimeError("FakeLLMServer is not running; call start() or use `with`")
        return f"http://127.0.0.1:{self._http.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, ending in ``/v1``."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for the Anthropic SDK (it appends ``/v1/messages``)."""
        return self.url

    # -- scripting -------------------------------------------------------------------------

    def enqueue(self, *replies: Reply | str) -> None:
        """Queue replies for the next normal requests, in order; a `str` is a text reply."""
        with self._lock:
            self._replies.extend(Reply(text=r) if isinstance(r, str) else r for r in replies)

    def fail_next(
        self,
        status: int,
        body: Mapping[str, Any] | str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next model call (any kind) with this status and body, once.

        Without a body, a 5xx gets the provider's server error and other codes a generic one.
        Several calls queue several faults.
        """
        with self._lock:
            self._faults.append(Fault(status, body, dict(headers or {})))

    def fail_next_summaries(self, kind: SummaryFailure, count: int = 1) -> None:
        """Make the next `count` summary requests fail with `kind` (before `summary_failure`)."""
        _check_choice("kind", kind, SummaryFailure)
        with self._lock:
            self._summary_faults.extend([kind] * count)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order (a copy)."""
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Forget recorded requests, queued replies and faults, and restart id numbering.

        Settings (window, formats, modes, responders) are kept.
        """
        with self._lock:
            self._requests.clear()
            self._replies.clear()
            self._faults.clear()
            self._summary_faults.clear()
            self._responses = self._tool_calls = 0
        self._held.clear()

    # -- serving ---------------------------------------------------------------------------

    def _handle(self, method: str, path: str, body: Any, headers: dict[str, str]) -> HTTPResponse:
        with self._lock:
            self._requests.append(RecordedRequest(path, body, headers))
        route = (method, path)
        if route == ("POST", "/v1/chat/completions"):
            return self._model_call(body, "openai")
        if route == ("POST", "/v1/messages") and self.messages_api:
            return self._model_call(body, "anthropic")
        if route == ("POST", "/v1/responses") and self.responses_api:
            items = self._held.input_of(body)
            if isinstance(items, HTTPResponse):
                return items
            return self._model_call(chat_view(items, body), "openai", responses=(body, items))
        if route == ("GET", "/v1/models"):
            return HTTPResponse(200, model_list(self.model, self.context_window))
        if route == ("POST", "/api/show"):
            asked = body.get("model") or body.get("name") if isinstance(body, Mapping) else None
            if asked not in (None, self.model):  # Ollama answers 404 for a model it does not have
                return HTTPResponse(404, {"error": f"model '{asked}' not found"})
            return HTTPResponse(200, ollama_show(self.architecture, self.context_window))
        served = self.messages_api and "anthropic-version" in headers
        provider: Provider = "anthropic" if served else "openai"
        return HTTPResponse(*invalid_request(provider, f"Unknown route {method} {path}", 404))

    def _model_call(
        self, body: Any, provider: Provider, responses: tuple[Mapping[str, Any], list[Any]] | None = None
    ) -> HTTPResponse:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return HTTPResponse(*invalid_request(provider, "'messages' must be a list"))
        if self.delay_seconds > 0:
            self._stopping.wait(self.delay_seconds)
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
        if fault is not None:
            return HTTPResponse(*fault.error(provider), headers=fault.headers)
        prompt = self.counter(body)
        max_tokens = (
            body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens")
        )
        rejected = self._check_window(
            "anthropic" if provider == "anthropic" else self.overflow_format, prompt, max_tokens
        )
        if rejected is not None:
            return rejected
        if is_summary_request(body, self.summary_marker):
            reply = self._summary(body, provider)
        else:
            reply = self._next_reply(body)
        if isinstance(reply, HTTPResponse):
            return reply
        # Only Ollama gets here with prompt > window: it reports what it kept.
        c = self._complete(body, reply, min(prompt, self.context_window), max_tokens)
        stream = bool(body.get("stream"))
        if responses is not None:
            return self._held.answer(c, *responses, stream)
        if provider == "anthropic":
            return (
                HTTPResponse(events=anthropic_events(c))
                if stream
                else HTTPResponse(200, anthropic_message(c))
            )
        if stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return HTTPResponse(events=openai_chunks(c, include_usage))
        return HTTPResponse(200, openai_completion(c))

    def _check_window(self, fmt: OverflowFormat, prompt: int, max_tokens: int | None) -> HTTPResponse | None:
        window = self.context_window
        enforce = self.enforce_max_tokens
        if enforce is None:
            enforce = fmt not in _NO_TOTAL_CHECK
        total = enforce and max_tokens is not None and prompt + max_tokens > window
        if prompt <= window and not total:
            return None
        with self._lock:
            request_id = f"fake-request-{len(self._requests):04d}"
        error = overflow_error(
            fmt,
            window=window,
            prompt=prompt,
            max_tokens=max_tokens,
            total=prompt <= window,
            request_id=request_id,
        )
        return None if error is None else HTTPResponse(*error)

    def _next_reply(self, body: Mapping[str, Any]) -> Reply:
        with self._lock:
            scripted = self._replies.popleft() if self._replies else None
        return scripted if scripted is not None else self.responder(body)

    def _summary(self, body: Mapping[str, Any], provider: Provider) -> Reply | HTTPResponse:
        with self._lock:
            kind = self._summary_faults.popleft() if self._summary_faults else self.summary_failure
        if kind == "http_500":
            return HTTPResponse(*server_error(provider))
        if kind in ("malformed_json", "empty"):
            return broken_summary(kind)
        if kind == "timeout":
            self._stopping.wait(self.timeout_seconds)  # stop() cuts the stall short
        if self.summary_responder is not None:
            return self.summary_responder(body)
        return summary_reply(body, self.summary_marker)

    def _complete(
        self, body: Mapping[str, Any], reply: Reply, prompt: int, max_tokens: int | None
    ) -> Completion:
        parts = [reply.text, reply.reasoning or "", *(t.arguments_json() for t in reply.tool_calls)]
        tokens = sum(count_output(part, self.encoder) for part in parts if part)
        truncated = max_tokens is not None and tokens > max_tokens
        if truncated and max_tokens is not None:
            # Providers cut the output at max_tokens; a half-written tool call is not kept.
            reply, tokens = Reply(text=truncate_output(reply.text, max_tokens, self.encoder)), max_tokens
        with self._lock:
            self._responses += 1
            number, first_tool = self._responses, self._tool_calls + 1
            self._tool_calls += len(reply.tool_calls)
        return Completion(
            number=number,
            model=str(body.get("model") or self.model),
            reply=reply,
            tool_numbers=tuple(range(first_tool, first_tool + len(reply.tool_calls))),
            truncated=truncated,
            prompt_tokens=prompt,
            completion_tokens=tokens,
            usage_mode=self.usage_mode,
        )
