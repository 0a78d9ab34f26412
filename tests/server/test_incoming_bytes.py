"""A client's re-sent history recognised by its bytes converts exactly as the whole history would."""

from __future__ import annotations

import json

from contextkeep._formats.openai import from_openai
from contextkeep.server._incoming import ClientMemory
from support.client_bodies import resent_bodies


def test_appends_edits_and_retries_convert_as_the_whole_history():
    memory = ClientMemory("c")
    for raw in resent_bodies(7):
        parsed = json.loads(raw)["messages"]
        assert [m.key for m in memory.convert(parsed, raw)] == [m.key for m in from_openai(parsed)]


def test_a_second_messages_key_is_not_taken_for_the_first():
    memory = ClientMemory("c")
    first = [{"role": "user", "content": "a"}]
    memory.convert(first, json.dumps({"messages": first}).encode())
    later = [{"role": "user", "content": "b"}]
    raw = b'{"messages": [{"role": "user", "content": "a"}], "messages": ' + json.dumps(later).encode() + b"}"
    assert [m.text for m in memory.convert(json.loads(raw)["messages"], raw)] == ["b"]
