"""Model adapters, capabilities and provider error classification.

Importing this package does not import any SDK: each adapter imports its SDK when built
and raises `ConfigError` naming the extra to install when it is missing.
"""

from contextkeep.models._common import ProviderError
from contextkeep.models.adapter import ModelAdapter, ModelReply, SpecifiedAdapter, adapter_spec
from contextkeep.models.anthropic import AnthropicAdapter
from contextkeep.models.litellm import LiteLLMAdapter
from contextkeep.models.openai import OpenAIAdapter
from contextkeep.models.overflow import check_silent_truncation, classify_error, classify_exception

__all__ = [
    "AnthropicAdapter",
    "LiteLLMAdapter",
    "ModelAdapter",
    "ModelReply",
    "OpenAIAdapter",
    "ProviderError",
    "SpecifiedAdapter",
    "adapter_spec",
    "check_silent_truncation",
    "classify_error",
    "classify_exception",
]
