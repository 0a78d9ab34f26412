"""Google ADK request contents as contextkeep messages (the view goes back in `_adk_view`).

An ADK request holds `google.genai.types.Content`s of two roles. A `model` content becomes one
assistant message (its text, thought parts as reasoning, function calls as tool calls); a `user`
content becomes one tool message per `function_response` part, then one user message with its
other parts. This is the shape ADK's own OpenAI-format bridge (`LiteLlm`) sends, so counts match
what a chat-completions provider receives. A function result `{"result": text}` (how ADK wraps a
tool's return value) shows as `text`; any other result as its JSON.

Call ids ADK made itself (`adk-…`, given after the reply is recorded, and stripped again before a
model that pairs calls by position) count as none: such calls get the stable ids `Session.sync`
derives from their position, the same whether the history comes from a request or from ADK's
session events. Only the messages carry those ids; the contents sent keep ADK's own.

ADK builds every request afresh from its session events, with shallow copies that share the
payloads (text strings, argument and result dicts). :class:`History` converts a content once
and reuses the conversion while the content's anchor (the payloads themselves, not the copies
around them) compares equal: one C-level comparison per content, by identity for the payloads
of the same invocation, by value (still in C: strings and dicts) for a new invocation's deep
copy of the session.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

from google.adk.flows.llm_flows.functions import AF_FUNCTION_CALL_ID_PREFIX
from google.genai import types

from contextkeep._continuation import with_stable_ids
from contextkeep._messages import ContentPart, FilePart, ImagePart, Message, TextPart, ToolCall

__all__ = ["Converted", "History", "Place", "instructions_of", "message_of", "request_scoped", "tools_of"]

_Piece = tuple[Message, tuple[int, ...]]
"""A message and the indexes of the content's parts it came from."""


class Place(NamedTuple):
    """Where a history message came from in the request."""

    content: int
    """The content's index in the request."""
    parts: tuple[int, ...]
    """Indexes of the content's parts the message holds."""
    share: int
    """How many messages the content made."""


class Converted(NamedTuple):
    """One request's contents as messages (with stable call ids), and where each came from."""

    messages: list[Message]
    """The history, in order."""
    contents: Sequence[types.Content]
    """The request's contents."""
    places: list[Place]
    """`places[i]` is where `messages[i]` came from."""
    kept: int = 0
    """How many leading contents kept the conversion of the last request (their places too)."""


class History:
    """One conversation's request contents as messages, each content converted once."""

    def __init__(self) -> None:
        self.conversions = 0
        """Contents converted so far (each new or changed one once)."""
        self._anchors: list[tuple[object, ...]] = []
        """The anchors of the contents the last request held, as first seen."""
        self._ends: list[int] = []
        """`_ends[i]`: how many history messages the contents up to the i-th made."""
        self._messages: list[Message] = []
        self._places: list[Place] = []

    def convert(self, contents: Sequence[types.Content]) -> Converted:
        """The messages of `contents`, reusing the conversion of every content seen before."""
        anchors, keep = self._anchors, 0
        # The anchors kept are the first request's; the usual case is every content seen.
        # A content's anchor is built, compared and dropped at once: anchors kept per call
        # would outlive a collection each time and set off the costly full ones.
        for content, anchor in zip(contents, anchors, strict=False):
            if _anchor(content) != anchor:
                break
            keep += 1
        end = self._ends[keep - 1] if keep else 0
        del self._ends[keep:], self._messages[end:], self._places[end:], anchors[keep:]
        if keep < len(contents):
            anchors += map(_anchor, contents[keep:])
            self._add(contents, keep)
        self.conversions += len(contents) - keep
        return Converted(list(self._messages), contents, list(self._places), keep)

    def _add(self, contents: Sequence[types.Content], first: int) -> None:
        """Convert the contents from `first` on; give their calls the ids a whole-history sync derives."""
        messages, places = self._messages, self._places
        end = len(messages)
        for i in range(first, len(contents)):
            pieces = _pieces(contents[i])
            messages += [m for m, _ in pieces]
            places += [Place(i, idx, len(pieces)) for _, idx in pieces]
            self._ends.append(len(messages))
        start = next((j for j in range(end - 1, -1, -1) if messages[j].tool_calls), end)
        messages[start:] = cast(list[Message], with_stable_ids(messages[start:], start=start))


def _anchor(content: types.Content) -> tuple[object, ...]:
    """What the conversion reads of a content, as the payload objects ADK's copies share.

    Holding the objects (not their ids) keeps them alive and lets a deep copy compare equal. A
    call or result starts with its class, which no text part's first item (a string) equals.
    """
    out: list[object] = [content.role]
    for p in content.parts or ():
        if (fc := p.function_call) is not None:
            out += (types.FunctionCall, fc.args, fc.id, fc.name)
        elif (fr := p.function_response) is not None:
            out += (types.FunctionResponse, fr.response, fr.id, fr.name)
        else:
            out += (p.text, p.thought, p.inline_data, p.file_data, p.executable_code, p.code_execution_result)
    return tuple(out)


def _pieces(content: types.Content) -> list[_Piece]:
    parts = content.parts or []
    if content.role == "model":
        return [(message_of(content), tuple(range(len(parts))))] if parts else []
    out: list[_Piece] = []
    for i, p in enumerate(parts):
        if (fr := p.function_response) is not None:
            out.append(
                (Message("tool", _result_text(fr.response), tool_call_id=_own(fr.id), name=fr.name), (i,))
            )
    rest = tuple(i for i, p in enumerate(parts) if p.function_response is None and not p.thought)
    body = _body([parts[i] for i in rest])
    if body is not None:
        out.append((Message("user", body), rest))
    return out


def message_of(content: types.Content) -> Message:
    """A `model` content (a reply) as one assistant message; its calls keep the model's ids (or none)."""
    parts = content.parts or []
    calls = tuple(
        ToolCall(_own(fc.id) or "", fc.name or "", _json(fc.args or {}))
        for p in parts
        if (fc := p.function_call)
    )
    thoughts = [p.text for p in parts if p.thought and p.text]
    body = _body([p for p in parts if not p.thought and p.function_call is None])
    return Message("assistant", body, calls, reasoning="".join(thoughts) or None)


def _own(call_id: str | None) -> str | None:
    """A call id the model gave, or None for none or one ADK made."""
    return None if call_id is None or call_id.startswith(AF_FUNCTION_CALL_ID_PREFIX) else call_id


def _body(parts: Sequence[types.Part]) -> str | tuple[ContentPart, ...] | None:
    items = [x for p in parts if (x := _content_part(p)) is not None]
    if not items:
        return None
    if len(items) == 1 and isinstance(items[0], TextPart):
        return items[0].text
    return tuple(items)


def _content_part(p: types.Part) -> ContentPart | None:
    if p.text is not None:
        return TextPart(p.text)
    if (blob := p.inline_data) is not None and blob.data is not None:
        mime = blob.mime_type or "application/octet-stream"
        return _media(f"data:{mime};base64,{base64.b64encode(blob.data).decode()}", mime, blob.display_name)
    if (file := p.file_data) is not None and file.file_uri:
        return _media(file.file_uri, file.mime_type, file.display_name)
    if (code := p.executable_code) is not None:
        return TextPart(code.code or "")
    if (ran := p.code_execution_result) is not None:
        return TextPart(ran.output or "")
    return None


def _media(url: str, mime: str | None, name: str | None) -> ImagePart | FilePart:
    return ImagePart(url, mime) if (mime or "").startswith("image/") else FilePart(url, mime, name)


def _result_text(response: Mapping[str, Any] | None) -> str:
    if response is None:
        return ""
    if len(response) == 1 and isinstance(response.get("result"), str):
        return str(response["result"])
    return _json(response)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def request_scoped(contents: Sequence[types.Content], user_content: types.Content | None) -> list[int]:
    """Indexes of the contents ADK put in for this request only, not from the session's events.

    ADK inserts them at the current turn: after the latest function response, or before the
    message that started the invocation. So they are the user contents after the latest model
    content or function response, other than that message.
    """
    latest = -1
    for i, c in enumerate(contents):
        if c.role == "model" or any(p.function_response is not None for p in c.parts or ()):
            latest = i
    return [i for i in range(latest + 1, len(contents)) if contents[i] != user_content]


def instructions_of(config: types.GenerateContentConfig | types.Content | None) -> str | None:
    """The text of a system instruction (ADK sends it beside the contents), or of a content."""
    value: Any = (
        config if isinstance(config, types.Content) else None if config is None else config.system_instruction
    )
    if value is None:
        return None
    if isinstance(value, types.Content):
        value = value.parts or []
    items = value if isinstance(value, list) else [value]
    texts: list[str] = []
    for item in items:
        text = item if isinstance(item, str) else item.text if isinstance(item, types.Part) else None
        if text:
            texts.append(text)
    return "\n".join(texts) or None


def tools_of(config: types.GenerateContentConfig | None) -> list[dict[str, Any]] | None:
    """The request's function declarations as OpenAI function tools (what is counted)."""
    out: list[dict[str, Any]] = []
    for tool in (config.tools if config is not None else None) or []:
        if isinstance(tool, types.Tool):
            out += [_tool(fd) for fd in tool.function_declarations or []]
    return out or None


def _tool(fd: types.FunctionDeclaration) -> dict[str, Any]:
    if fd.parameters_json_schema is not None:
        parameters: Any = fd.parameters_json_schema
    elif fd.parameters is not None:
        parameters = fd.parameters.json_schema.model_dump(mode="json", exclude_none=True)
    else:
        parameters = {"type": "object", "properties": {}}
    function = {"name": fd.name or "", "description": fd.description or "", "parameters": parameters}
    return {"type": "function", "function": function}
