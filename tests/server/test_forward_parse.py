"""A client's re-sent history is not parsed again: only what follows it is, with the same result.

The proxy keeps the messages of each conversation's last body; a body that repeats them byte
for byte is parsed as the rest alone (its other fields and the new messages). Whatever the
layout, the request read must be the one a full parse reads, and a bad body must be refused
with the full parse's error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pydantic import ValidationError

from contextkeep.server import ServerSettings, create_app
from contextkeep.server import _incoming as incoming
from contextkeep.server._incoming import ChatRequest, ClientMemory
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support.client_bodies import resent_bodies


def _full(raw: bytes) -> ChatRequest:
    return ChatRequest.model_validate(json.loads(raw))


def _read(memory: ClientMemory, raw: bytes) -> ChatRequest:
    """What the proxy does with a body: parse it, then remember its messages."""
    chat = memory.parsed(raw)
    memory.convert(chat.messages, raw)
    return chat


def test_appends_retries_and_edits_read_as_the_whole_body():
    memory = ClientMemory("c")
    for raw in resent_bodies(11):
        assert _read(memory, raw).model_dump() == _full(raw).model_dump()


def test_whitespace_before_the_comma_is_read_and_other_bytes_are_refused():
    memory = ClientMemory("c")
    old = [{"role": "user", "content": "a"}]
    _read(memory, json.dumps({"model": "m", "messages": old}).encode())
    spaced = b'{"model": "m", "messages": [{"role": "user", "content": "a"}\n\t , {"role": "user", "content": "b"}]}'
    assert [m["content"] for m in _read(memory, spaced).messages] == ["a", "b"]
    garbled = spaced.replace(b"\n\t ,", b" 5 ,").replace(b'"b"', b'"c"')
    with pytest.raises(ValidationError):
        memory.parsed(garbled)


@pytest.mark.parametrize(
    "appended",
    [
        b"5",  # not a message
        b'{"role": "user", "content": "b"',  # cut off
        b'{"role": "user", "content": "b"}, "x"',  # a string after it
        b'{"role": "user", "content": "b\x01"}',  # a control character in a string
    ],
)
def test_a_bad_new_message_is_refused_with_the_full_parse_error(appended: bytes):
    memory = ClientMemory("c")
    head = b'{"model": "m", "messages": [{"role": "user", "content": "a"}'
    _read(memory, head + b"]}")
    raw = head + b", " + appended + b"]}"
    with pytest.raises(ValidationError) as full:
        incoming.parsed(raw, ChatRequest)  # the full parse, as every body was parsed before
    with pytest.raises(ValidationError) as ours:
        memory.parsed(raw)
    assert ours.value.errors(include_url=False) == full.value.errors(include_url=False)


class _Parses:
    """orjson, recording the size of each document the proxy parses."""

    JSONDecodeError = orjson.JSONDecodeError

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def loads(self, raw: bytes) -> Any:
        self.sizes.append(len(raw))
        return orjson.loads(raw)


def test_the_proxy_parses_only_what_a_request_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    parses = _Parses()
    monkeypatch.setattr(incoming, "orjson", parses)
    history = [{"role": "system", "content": "Answer briefly."}]
    history += [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 100} for i in range(200)]
    with FakeLLMServer(context_window=1_000_000) as upstream:
        settings = ServerSettings(
            store=f"sqlite:///{tmp_path / 'ck.db'}",
            workspace=str(tmp_path / "ws"),
            upstream=upstream.base_url,
            model="fake-model",
            window=1_000_000,
            tokenizer="heuristic",
        )
        with BackgroundServer(create_app(settings)) as server, httpx.Client(timeout=20) as client:
            headers = {"content-type": "application/json", "x-conversation-id": "parsed-once"}
            for _ in range(3):
                raw = json.dumps({"model": "fake-model", "messages": history}).encode()
                reply = client.post(f"{server.url}/v1/chat/completions", content=raw, headers=headers)
                reply.raise_for_status()
                history += [reply.json()["choices"][0]["message"], {"role": "user", "content": "next"}]
    assert parses.sizes[0] == len(json.dumps({"model": "fake-model", "messages": history[:201]}))
    assert all(size < 1_000 for size in parses.sizes[1:]), parses.sizes
    assert len(raw) > 100_000
