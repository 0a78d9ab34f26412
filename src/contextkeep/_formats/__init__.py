"""Converters between :class:`~contextkeep.Message` and provider formats."""

from contextkeep._formats.anthropic import from_anthropic, to_anthropic
from contextkeep._formats.openai import from_openai, to_openai
from contextkeep._formats.react import from_react, to_react

__all__ = ["from_anthropic", "from_openai", "from_react", "to_anthropic", "to_openai", "to_react"]
