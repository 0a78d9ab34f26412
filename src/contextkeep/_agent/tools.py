"""Tools an agent can call: plain Python functions with JSON schemas from their type hints."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import TypeAdapter, ValidationError

from contextkeep._errors import ConfigError

__all__ = ["Tool", "ToolError", "tool"]


class ToolError(Exception):
    """Raised by a tool (or for bad arguments): its message goes back to the model as the result."""


@dataclass(frozen=True)
class Tool:
    """A callable the model may invoke."""

    name: str
    """Function name the model uses."""
    description: str
    """What it does (the docstring's first paragraph by default)."""
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object."""
    fn: Callable[..., Any]
    """The function (sync or async)."""
    _adapters: Mapping[str, TypeAdapter[Any]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_function(
        cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> Tool:
        """Build a tool from a function's signature: each parameter's type hint becomes its schema."""
        hints = get_type_hints(fn, include_extras=True)
        properties: dict[str, Any] = {}
        required: list[str] = []
        adapters: dict[str, TypeAdapter[Any]] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {fn.__name__}", "*args and **kwargs cannot be described to a model")
            adapter: TypeAdapter[Any] = TypeAdapter(hints.get(pname, Any))
            adapters[pname] = adapter
            properties[pname] = adapter.json_schema()
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        doc = inspect.getdoc(fn) or ""
        schema = {"type": "object", "properties": properties, "required": required}
        return cls(name or fn.__name__, description or doc.split("\n\n")[0], schema, fn, adapters)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool definition."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    async def call(self, arguments: str) -> str:
        """Validate the model's JSON arguments, run the function, return its result as text."""
        try:
            raw = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments are not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ToolError("arguments must be a JSON object")
        unknown = set(raw) - set(self._adapters)
        if unknown:
            raise ToolError(f"unknown argument(s): {sorted(unknown)}")
        try:
            kwargs = {k: self._adapters[k].validate_python(v) for k, v in raw.items()}
        except ValidationError as exc:
            raise ToolError(f"invalid arguments: {exc.errors()[0]['msg']}") from None
        result = self.fn(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Decorator: `@tool` or `@tool(name=..., description=...)` turns a function into a :class:`Tool`."""

    def wrap(f: Callable[..., Any] | Callable[..., Awaitable[Any]]) -> Tool:
        return Tool.from_function(f, name=name, description=description)

    return wrap(fn) if fn is not None else wrap
