"""Converters between :class:`~contextkeep.messages.Message` and provider formats."""

from contextkeep.formats.anthropic import from_anthropic, to_anthropic
from contextkeep.formats.openai import from_openai, to_openai
from contextkeep.formats.react import from_react, to_react

__all__ = ["from_anthropic", "from_openai", "from_react", "to_anthropic", "to_openai", "to_react"]
