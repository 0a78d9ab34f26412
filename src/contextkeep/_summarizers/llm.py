"""The LLM summary: the model updates the previous structured summary with the new messages.

The model answers with a JSON object in plain text (no forced tool call, so reasoning
models work); the object is checked against the summary schema, and one retry carries
the error back to the model. New messages longer than the model can take are folded in
chunk by chunk. Chunks are sized by an estimate from the text's UTF-8 length (biased to
over-count: chunks stay within the summarising model's window), never by encoding the
transcript with the session's tokenizer: that cost 120-180 ms of CPU for 148 messages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextkeep._errors import ModelError, SummaryError
from contextkeep._messages import Message
from contextkeep._summarizers._render import fit_summary
from contextkeep._summarizers.base import DEFAULT_SUMMARY_FIELDS, SummaryRequest, SummaryResult
from contextkeep.models.adapter import ModelAdapter, ModelReply, adapter_spec

__all__ = [
    "SUMMARY_MARKER",
    "LLMSummarizer",
    "default_summary_schema",
    "parse_summary",
    "transcript_lines",
    "validate_json",
]

logger = logging.getLogger("contextkeep.summarizers")

SUMMARY_MARKER = "<<contextkeep:summarize>>"
"""Put in the system message of every summary request (fake servers and proxies recognise it)."""

_MARGIN_TOKENS = 512
"""Headroom kept free in the model's window besides the prompt, previous summary and answer."""
_MIN_CHUNK_TOKENS = 256
_BYTES_PER_TOKEN = 3.0
"""UTF-8 bytes per token of spaced text: 3.45 is the median line of the shared DeepSeek runs, so
this over-counts them by a fifth in aggregate (the worst line is under-counted by a third)."""
_DENSE_BYTES_PER_TOKEN = 1.4
"""Of ASCII text with almost no spaces (base64, hex, minified data): 1.43 for base64. Other text
is estimated at `_BYTES_PER_TOKEN`: a CJK character (3 bytes) is one token, about 1.5 in fact."""
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.S)
_TYPES: Mapping[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def default_summary_schema() -> dict[str, Any]:
    """The five default fields, each a string or a list of strings, all required."""
    field = {"type": ["string", "array"], "items": {"type": "string"}}
    return {
        "type": "object",
        "properties": {name: dict(field) for name in DEFAULT_SUMMARY_FIELDS},
        "required": list(DEFAULT_SUMMARY_FIELDS),
    }


def validate_json(value: Any, schema: Mapping[str, Any], where: str = "$") -> list[str]:
    """Errors of `value` against the JSON Schema subset we use: type, properties, required, items."""
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        # bool is an int in Python, not in JSON.
        ok = any(
            isinstance(value, _TYPES[n]) and not (isinstance(value, bool) and n in ("integer", "number"))
            for n in names
            if n in _TYPES
        )
        if not ok:
            return [f"{where}: expected {' or '.join(names)}, got {type(value).__name__}"]
    errors: list[str] = []
    if isinstance(value, dict):
        errors += [
            f"{where}: missing required field {k!r}" for k in schema.get("required", ()) if k not in value
        ]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors += validate_json(value[key], sub, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate_json(item, schema["items"], f"{where}[{i}]")
    return errors


def parse_summary(text: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object in a reply (fences and surrounding prose ignored); ValueError says what is wrong."""
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the answer holds no JSON object")
    try:
        value = json.loads(body[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer is not valid JSON: {exc}") from None
    errors = validate_json(value, schema)
    if errors:
        raise ValueError("the JSON does not match the schema: " + "; ".join(errors[:10]))
    if not isinstance(value, dict):
        raise ValueError("the answer is not a JSON object")
    return value


def transcript_lines(messages: Sequence[Message]) -> list[str]:
    """Each message as plain text: role, text, tool calls with arguments, tool outputs."""
    lines: list[str] = []
    for m in messages:
        if m.role == "tool":
            label = " ".join(x for x in ("tool result", m.name, m.tool_call_id) if x)
            lines.append(f"[{label}]\n{m.text}")
            continue
        parts = [f"[{m.role}] {m.text}".rstrip()] if m.text.strip() or not m.tool_calls else []
        parts += [f"[{m.role} calls {c.name} {c.id}] {c.arguments}" for c in m.tool_calls]
        parts += [f"[{m.role} media] {p.url[:80]}" for p in m.media]
        lines.append("\n".join(parts))
    return lines


class LLMSummarizer:
    """Layer-3 summariser that asks a model for an updated structured summary."""

    def __init__(
        self, adapter: ModelAdapter, *, max_input_tokens: int | None = None, timeout: float | None = None
    ) -> None:
        """Summarise through `adapter`.

        `max_input_tokens` bounds the new messages sent per call (default: from the model's window,
        no chunking when unknown); `timeout` bounds each model call in seconds.
        """
        self.adapter = adapter
        self.max_input_tokens = max_input_tokens
        self.timeout = timeout

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Fold `request.messages` into `request.previous`; raises `SummaryError` with the reason."""
        config = request.config
        schema = config.summary_schema or default_summary_schema()
        fields = tuple(schema.get("properties", {})) or DEFAULT_SUMMARY_FIELDS
        system = self._system_prompt(request, schema)
        previous: Mapping[str, Any] | str | None = None
        if request.previous is not None:
            previous = request.previous.data if request.previous.data is not None else request.previous.text
        chunks = self._chunks(request, system)
        waited = _Wait()
        for n, chunk in enumerate(chunks, 1):
            logger.info("summary chunk %d/%d for %s", n, len(chunks), request.conversation_id)
            previous = await self._fold(system, previous, chunk, schema, config.max_summary_tokens, waited)
        if not isinstance(previous, Mapping):  # no new messages: nothing was asked
            raise SummaryError("no new messages to summarise")
        data, text = fit_summary(previous, request.counter, config.max_summary_tokens, fields=fields)
        if data != previous:
            logger.warning("LLM summary over %d tokens: fields trimmed", config.max_summary_tokens)
        if not text.strip():
            raise SummaryError("the model returned an empty summary")
        return SummaryResult(text=text, data=data, method="llm", wait_seconds=waited.seconds)

    def _system_prompt(self, request: SummaryRequest, schema: Mapping[str, Any]) -> str:
        return (
            f"{SUMMARY_MARKER}\n{request.config.compression_prompt}\n\n"
            "You receive the previous summary (JSON, possibly none) and the new messages of the "
            "conversation. Update the previous summary with the new messages rather than starting "
            "again: keep what still holds, add what is new. Keep exact file paths, numbers, "
            "identifiers, commands, error messages and the user's own requests; never invent anything.\n"
            f"Stay under {request.config.max_summary_tokens} tokens. Answer ONLY with one JSON object "
            f"matching this JSON Schema, without any other text:\n{json.dumps(schema, ensure_ascii=False)}"
            + _digest_section(request.digest)
        )

    def _chunks(self, request: SummaryRequest, system: str) -> list[str]:
        """The new messages' transcript, split so each call stays within the input bound (estimated)."""
        lines = transcript_lines(request.messages)
        limit = self._input_limit(request, system)
        if limit is None:
            return ["\n\n".join(lines)] if lines else []
        return _packed((p for line in lines for p in _split(line, limit)), limit, "\n\n")

    def _input_limit(self, request: SummaryRequest, system: str) -> int | None:
        if self.max_input_tokens is not None:
            return max(self.max_input_tokens, 1)
        window = adapter_spec(self.adapter).context_window
        if window is None:
            return None
        # The window holds the prompt, the previous summary and the answer (each up to the bound).
        overhead = request.counter.count_text(system) + 2 * request.config.max_summary_tokens + _MARGIN_TOKENS
        if window - overhead < _MIN_CHUNK_TOKENS:
            raise SummaryError(f"the model's context window ({window}) is too small for a summary call")
        return window - overhead

    async def _fold(
        self,
        system: str,
        previous: Mapping[str, Any] | str | None,
        transcript: str,
        schema: Mapping[str, Any],
        max_tokens: int,
        waited: _Wait,
    ) -> dict[str, Any]:
        """One call (and at most one retry): the previous summary updated with `transcript`."""
        if previous is None:
            before = "Previous summary: none (this is the first summary)."
        elif isinstance(previous, str):
            before = f"Previous summary (text):\n{previous}"
        else:
            before = f"Previous summary (JSON):\n{json.dumps(previous, ensure_ascii=False)}"
        messages = [Message("system", system), Message("user", f"{before}\n\nNew messages:\n{transcript}")]
        for attempt in (1, 2):
            text = (await self._call(messages, max_tokens, waited)).message.text
            if not text.strip():
                raise SummaryError("the model returned an empty answer")
            try:
                return parse_summary(text, schema)
            except ValueError as exc:
                if attempt == 2:
                    raise SummaryError(f"invalid summary after one retry: {exc}") from None
                logger.warning("summary answer rejected, retrying once: %s", exc)
                messages += [
                    Message("assistant", text),
                    Message(
                        "user", f"Your answer cannot be used: {exc}. Answer again with ONLY the JSON object."
                    ),
                ]
        raise AssertionError("unreachable")

    async def _call(self, messages: Sequence[Message], max_tokens: int, waited: _Wait) -> ModelReply:
        started = time.perf_counter()
        try:
            return await asyncio.wait_for(
                self.adapter.complete(messages, max_tokens=max_tokens), self.timeout
            )
        except TimeoutError:
            raise SummaryError(f"the summary call timed out after {self.timeout} s") from None
        except ModelError as exc:
            raise SummaryError(f"the summary call failed: {exc}") from exc
        finally:
            waited.seconds += time.perf_counter() - started


@dataclass(slots=True)
class _Wait:
    """Time one summary spent waiting for the model (its calls and retries)."""

    seconds: float = 0.0


def _digest_section(lines: Sequence[str]) -> str:
    """The digest the agent saw of the rounds being summarised: what the summary must keep."""
    if not lines:
        return ""
    return (
        "\n\nThe agent saw these rounds as the following verbatim digest (its commands, each with the "
        "reference to its output, and lines it used). Keep its lines in the summary verbatim "
        "unless a newer message makes them wrong:\n" + "\n".join(lines)
    )


def _estimate(text: str) -> int:
    """Tokens `text` takes at most, about: from its UTF-8 length, and its spacing when ASCII."""
    if text.isascii():
        dense = (text.count(" ") + text.count("\n")) * 20 < len(text)
        return math.ceil(len(text) / (_DENSE_BYTES_PER_TOKEN if dense else _BYTES_PER_TOKEN))
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / _BYTES_PER_TOKEN)


def _packed(pieces: Iterable[str], limit: int, separator: str) -> list[str]:
    """`pieces` joined by `separator` into as few texts as keep each within `limit` estimated tokens."""
    out: list[str] = []
    current: list[str] = []
    used = 0
    for piece in pieces:
        size = _estimate(piece) + 1  # the separator
        if current and used + size > limit:
            out.append(separator.join(current))
            current, used = [], 0
        current.append(piece)
        used += size
    if current:
        out.append(separator.join(current))
    return out


def _split(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most about `limit` tokens, by lines; a line alone too long is cut."""
    if _estimate(text) <= limit:
        return [text]
    return _packed((p for whole in text.split("\n") for p in _cut(whole, limit)), limit, "\n")


def _cut(line: str, limit: int) -> list[str]:
    """One line in pieces of at most `limit` estimated tokens."""
    pieces: list[str] = []
    while (size := _estimate(line)) > limit:
        # Proportional cut, then shrink until it fits (bytes per character vary along the text).
        cut = max(1, math.floor(len(line) * limit / size))
        while cut > 1 and _estimate(line[:cut]) > limit:
            cut = max(1, cut * 9 // 10)
        pieces.append(line[:cut])
        line = line[cut:]
    return [*pieces, line]
