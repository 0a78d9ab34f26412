"""Building the model adapters: optional SDKs, credentials, and import cost."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from contextkeep._errors import ConfigError
from contextkeep.models import AnthropicAdapter, LiteLLMAdapter, OpenAIAdapter


@pytest.mark.parametrize(
    ("module", "build", "extra"),
    [
        ("anthropic", lambda: AnthropicAdapter("m", api_key="k"), "anthropic"),
        ("litellm", lambda: LiteLLMAdapter("m"), "litellm"),
    ],
)
def test_missing_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, build: Any, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(ConfigError, match=rf"contextkeep\[{extra}\]"):
        build()


def test_openai_without_api_key_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        OpenAIAdapter("m")
    assert caught.value.key == "api_key"


def test_importing_models_does_not_import_sdks() -> None:
    code = "import sys, contextkeep.models; print(sorted({'openai', 'anthropic'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
