"""The fake LLM server fixture and real SDK clients pointed at it, for the fake-server tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
import tiktoken

from contextkeep.testing import FakeLLMServer
from support import closing, use_offline_tokenizers

# tiktoken reads this when the encoding is first loaded, so setting it here is early enough.
use_offline_tokenizers()

# Messages and tools stay plain dicts (`Any`): these tests are about the wire format, not the SDKs' TypedDicts.
USER: Any = [{"role": "user", "content": "hi"}]
WINDOW = 100


def tokens(text: str) -> int:
    return len(tiktoken.get_encoding("o200k_base").encode(text))


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(context_window=WINDOW) as server:
        yield server


# The server is plain HTTP: skipping certificate loading saves ~40 ms per client.
def oai(server: FakeLLMServer, **kwargs: Any) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(verify=False)
    return closing(
        openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, http_client=http, **kwargs)
    )


def claude(server: FakeLLMServer) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(verify=False)
    return closing(
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="k", max_retries=0, http_client=http)
    )


def fixed(n: int) -> Any:
    """A counter that says every prompt has `n` tokens."""
    return lambda body: n
