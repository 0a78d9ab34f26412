"""How a provider frames messages into the prompt it counts.

A :class:`Framing` renders each message to the text the provider tokenizes, plus
a constant for framing tokens that a text encoder cannot see (OpenAI's
`<|im_start|>`). Rendering may depend on a small context (the role of the
previous message, a tool result's place in its group, whether the message lies
after the last user message); `step` derives that context as a fold over the
messages, so counts stay cacheable per (message, context).

- :class:`OpenAIFraming`: OpenAI chat (3 tokens a message, 3 to prime the reply,
  tool definitions rendered the way the model sees them).
- :class:`DeepSeekFraming`: DeepSeek's published V3.x chat template, which
  reproduces DeepSeek's billed `prompt_tokens` exactly with its `tokenizer.json`.
- :class:`AnthropicFraming`: Anthropic Messages (no public tokenizer; constants
  approximate the framing, use calibration for precision).
- :class:`PlainFraming`: text only, no framing.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from contextkeep._messages import Message

__all__ = [
    "AnthropicFraming",
    "DeepSeekFraming",
    "Framing",
    "OpenAIFraming",
    "PlainFraming",
    "framing_for_model",
]

Tools = Sequence[Mapping[str, Any]]


class FoldState(NamedTuple):
    """What a framing remembers while walking the messages (a tuple: it is made and compared per message)."""

    prev_role: str | None = None
    """Role of the previous message."""
    calls: int = 0
    """Tool calls made by the newest assistant message."""
    results: int = 0
    """Tool results seen since that assistant message."""


@runtime_checkable
class Framing(Protocol):
    """Renders messages the way a provider tokenizes them."""

    @property
    def name(self) -> str:
        """Stable identifier, part of every cache key."""
        ...

    @property
    def turn_sensitive(self) -> bool:
        """Whether a message's rendering changes once a later user message arrives."""
        ...

    def step(self, message: Message, state: FoldState, *, has_tools: bool) -> tuple[Hashable, FoldState]:
        """The context `message` renders in, and the state after it."""
        ...

    def render(self, message: Message, context: Hashable, *, in_last_turn: bool) -> tuple[str, int]:
        """Text to encode for `message`, and framing tokens to add that the text cannot carry."""
        ...

    def fixed(self, tools: Tools | None) -> tuple[str, int]:
        """Per-request text (tool definitions) and constant tokens (reply priming, BOS)."""
        ...


def _advance(message: Message, state: FoldState) -> FoldState:
    if message.role == "assistant":
        return FoldState("assistant", len(message.tool_calls), 0)
    results = state.results + 1 if message.role == "tool" else 0
    return FoldState(message.role, state.calls, results)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _tool_function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, Mapping) else {}


class PlainFraming:
    """Message text only: no framing, no tool rendering beyond the JSON definitions."""

    name = "plain"
    turn_sensitive = False

    def step(self, message: Message, state: FoldState, *, has_tools: bool) -> tuple[Hashable, FoldState]:
        """No context: plain text renders the same wherever it stands."""
        return None, _advance(message, state)

    def render(self, message: Message, context: Hashable, *, in_last_turn: bool) -> tuple[str, int]:
        """The text and each tool call's name and arguments, with no framing tokens."""
        calls = "".join(f"\n{c.name} {c.arguments}" for c in message.tool_calls)
        return message.text + calls, 0

    def fixed(self, tools: Tools | None) -> tuple[str, int]:
        """The tool definitions as JSON, with no constant tokens."""
        return ("\n".join(_json(_tool_function(t)) for t in tools) if tools else ""), 0


class OpenAIFraming:
    """OpenAI chat completions: `<|im_start|>role<|im_sep|>content<|im_end|>` per message."""

    name = "openai"
    turn_sensitive = False
    per_message = 3
    per_name = 1
    per_call = 7
    reply_priming = 3

    def step(self, message: Message, state: FoldState, *, has_tools: bool) -> tuple[Hashable, FoldState]:
        """No context: OpenAI's chat format renders each message the same wherever it stands."""
        return None, _advance(message, state)

    def render(self, message: Message, context: Hashable, *, in_last_turn: bool) -> tuple[str, int]:
        """Role, text and tool calls, plus the per-message (and per-name) tokens."""
        text = message.role + message.text
        extra = self.per_message + (self.per_name if message.name else 0)
        for c in message.tool_calls:
            text += f"functions.{c.name}\n{c.arguments}"
            extra += self.per_call
        return text, extra

    def fixed(self, tools: Tools | None) -> tuple[str, int]:
        """Tool definitions as OpenAI's TypeScript namespace, and the reply priming tokens."""
        if not tools:
            return "", self.reply_priming
        return _typescript_namespace(tools), self.reply_priming + 9


def _typescript_namespace(tools: Tools) -> str:
    # The chat models see function definitions as a TypeScript namespace.
    lines = ["namespace functions {", ""]
    for tool in tools:
        fn = _tool_function(tool)
        if fn.get("description"):
            lines.append(f"// {fn['description']}")
        params = fn.get("parameters") or {}
        props: Mapping[str, Any] = params.get("properties") or {}
        if props:
            lines.append(f"type {fn.get('name')} = (_: {{")
            required = set(params.get("required") or ())
            for pname, spec in props.items():
                if isinstance(spec, Mapping) and spec.get("description"):
                    lines.append(f"// {spec['description']}")
                optional = "" if pname in required else "?"
                lines.append(f"{pname}{optional}: {_ts_type(spec)},")
            lines.append("}) => any;")
        else:
            lines.append(f"type {fn.get('name')} = () => any;")
        lines.append("")
    lines.append("} // namespace functions")
    return "\n".join(lines)


def _ts_type(spec: Any) -> str:
    if not isinstance(spec, Mapping):
        return "any"
    if "enum" in spec:
        return " | ".join(_json(v) for v in spec["enum"])
    kind = spec.get("type")
    if kind == "array":
        return f"{_ts_type(spec.get('items'))}[]"
    if kind == "object":
        return "object"
    return {"integer": "number", "number": "number", "string": "string", "boolean": "boolean"}.get(
        str(kind), "any"
    )


class AnthropicFraming:
    """Anthropic Messages; framing constants are estimates (no public tokenizer)."""

    name = "anthropic"
    turn_sensitive = False
    per_message = 4
    per_call = 12
    tools_overhead = 340  # the tool-use system prompt Anthropic documents for tool-enabled requests

    def step(self, message: Message, state: FoldState, *, has_tools: bool) -> tuple[Hashable, FoldState]:
        """No context: each message renders the same wherever it stands."""
        return None, _advance(message, state)

    def render(self, message: Message, context: Hashable, *, in_last_turn: bool) -> tuple[str, int]:
        """Text, reasoning and tool calls, plus the per-message tokens."""
        text = message.text + (message.reasoning or "")
        extra = self.per_message
        for c in message.tool_calls:
            text += c.name + c.arguments
            extra += self.per_call
        return text, extra

    def fixed(self, tools: Tools | None) -> tuple[str, int]:
        """Tool definitions as JSON and their overhead."""
        if not tools:
            return "", 0
        return "\n".join(_json(_tool_function(t)) for t in tools), self.tools_overhead


# DeepSeek's chat template (V3.2 encoding, as published with the model weights).
_BOS = "<｜begin▁of▁sentence｜>"
_EOS = "<｜end▁of▁sentence｜>"
_USER = "<｜User｜>"
_ASSISTANT = "<｜Assistant｜>"
_THINK, _END_THINK = "<think>", "</think>"
_DSML = "｜DSML｜"
_DEEPSEEK_TOOLS = """## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{d}function_calls>" block like the following as part of your reply to the user:
<{d}function_calls>
<{d}invoke name="$FUNCTION_NAME">
<{d}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{d}parameter>
...
</{d}invoke>
<{d}invoke name="$FUNCTION_NAME2">
...
</{d}invoke>
</{d}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{d}function_calls>
...
</{d}function_calls>
<function_results>
...
</function_results>
{think}...thinking about results{end_think}
Here are the functions available in JSONSchema format:
<functions>
{schemas}
</functions>
"""  # noqa: E501


class _DeepSeekContext(NamedTuple):
    has_tools: bool
    first_result: bool
    last_result: bool
    after_results: bool = False
    """A user message right after a closed run of tool results."""


class DeepSeekFraming:
    """DeepSeek V3.x chat template; `thinking=True` for reasoner (thinking-mode) requests.

    In thinking mode, reasoning of assistant messages after the last user message is
    part of the prompt and earlier reasoning is not, hence `turn_sensitive`.

    A run of tool results ends with the thinking token the reply opens with (`</think>`, or
    `<think>` in the last turn); DeepSeek's billed `prompt_tokens` leave it out when a user
    message comes next instead of a reply: one token fewer than the published template gives,
    on every call from then on. The user message carries the difference (-1), so a result's
    count never depends on what follows it.
    """

    def __init__(self, *, thinking: bool = False) -> None:
        self.thinking = thinking
        self.name = "deepseek-thinking" if thinking else "deepseek"
        self.turn_sensitive = thinking

    def step(self, message: Message, state: FoldState, *, has_tools: bool) -> tuple[Hashable, FoldState]:
        """Whether a tool result opens or closes its run of results (the template wraps the run)."""
        nxt = _advance(message, state)
        first = message.role == "tool" and state.prev_role != "tool"
        last = message.role == "tool" and nxt.results >= state.calls
        after = message.role == "user" and state.prev_role == "tool" and state.results >= state.calls
        return _DeepSeekContext(has_tools and message.role == "system", first, last, after), nxt

    def render(self, message: Message, context: Hashable, *, in_last_turn: bool) -> tuple[str, int]:
        """The text as DeepSeek's chat template renders it (thinking only in the last turn)."""
        assert isinstance(context, _DeepSeekContext)
        think = self.thinking and in_last_turn
        opener = _THINK if think else _END_THINK
        if message.role == "system":
            return message.text + ("\n\n" if context.has_tools else ""), 0
        if message.role == "user":
            return _USER + message.text + _ASSISTANT + opener, -1 if context.after_results else 0
        if message.role == "assistant":
            head = (message.reasoning or "") + _END_THINK if think else ""
            calls = _deepseek_calls(message) if message.tool_calls else ""
            return head + message.text + calls + _EOS, 0
        text = "\n\n<function_results>\n" if context.first_result else ""
        text += f"<result>{message.text}</result>\n"
        if context.last_result:
            text += "</function_results>\n\n" + opener
        return text, 0

    def fixed(self, tools: Tools | None) -> tuple[str, int]:
        """The BOS token, and the tool definitions as the template lists them."""
        if not tools:
            return _BOS, 0
        schemas = "\n".join(_json(_tool_function(t)) for t in tools)
        return _BOS + _DEEPSEEK_TOOLS.format(d=_DSML, think=_THINK, end_think=_END_THINK, schemas=schemas), 0


def _deepseek_calls(message: Message) -> str:
    invokes = []
    for c in message.tool_calls:
        try:
            args = json.loads(c.arguments) if c.arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError):  # rendered as sent, like any text
            args = c.arguments
        if isinstance(args, dict):
            body = "\n".join(
                f'<{_DSML}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
                f"{v if isinstance(v, str) else _json(v)}</{_DSML}parameter>"
                for k, v in args.items()
            )
        else:
            body = str(args)
        invokes.append(f'<{_DSML}invoke name="{c.name}">\n{body}\n</{_DSML}invoke>')
    return f"\n\n<{_DSML}function_calls>\n" + "\n".join(invokes) + f"\n</{_DSML}function_calls>"


def framing_for_model(model: str) -> Framing:
    """The framing a model family uses (OpenAI's when unsure)."""
    bare = model.rsplit("/", 1)[-1].lower()
    if bare.startswith("deepseek"):
        return DeepSeekFraming(thinking="reasoner" in bare or bare.startswith("deepseek-r1"))
    if bare.startswith("claude"):
        return AnthropicFraming()
    return OpenAIFraming()
