"""Client retries, regenerated replies and edited messages through the proxy, with the real `openai` SDK."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from contextkeep._config import ContextConfig
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply
from support.proxy_fixtures import chat_calls, openai_client, served_proxy

TASK: Any = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Name three prime numbers."},
]


def serve(tmp_path: Path, upstream: FakeLLMServer) -> BackgroundServer:
    return served_proxy(tmp_path, upstream, window=8_192, config=ContextConfig(min_keep_tokens=0))


_REPLIES = itertools.count(1)


def numbered(body: Any) -> Reply:
    """Every reply different, so no two branches share a reply by chance."""
    return Reply(text=f"reply {next(_REPLIES)} to: {body['messages'][-1]['content']}")


def reply_of(completion: Any) -> dict[str, Any]:
    message: dict[str, Any] = completion.choices[0].message.model_dump(exclude_none=True)
    return message


@pytest.mark.slow
def test_sdk_retries_after_a_client_timeout_get_the_reply_without_a_second_upstream_call(tmp_path):
    # The upstream takes 2 s, the client gives up after 1 s and retries (the SDK's own retry loop):
    # the reply of the first attempt, stored but never delivered, answers the retry.
    with FakeLLMServer() as upstream, serve(tmp_path, upstream) as server:
        openai_client(server, "warm-up").chat.completions.create(model="fake-model", messages=TASK)
        upstream.reset()
        upstream.delay_seconds = 2.0
        # openai's own retry loop (2 retries by default; 4 here so a loaded test machine cannot
        # make every attempt time out before the first reply is stored).
        impatient = openai_client(server, "retried", timeout=1.0, max_retries=4)
        history: Any = list(TASK)
        for turn in range(3):
            history.append(reply_of(impatient.chat.completions.create(model="fake-model", messages=history)))
            history.append({"role": "user", "content": f"And {turn + 4} more?"})
            assert chat_calls(upstream) == turn + 1  # one upstream call per distinct request
        # The conversation is alive: the next request continues it as usual.
        upstream.delay_seconds = 0.0
        patient = openai_client(server, "retried")
        assert patient.chat.completions.create(model="fake-model", messages=history).choices
        assert chat_calls(upstream) == 4


def test_an_idempotency_key_returns_the_stored_reply(tmp_path):
    with FakeLLMServer() as upstream, serve(tmp_path, upstream) as server:
        client = openai_client(server, "keyed")
        key = {"Idempotency-Key": "order-7"}
        first = client.chat.completions.create(model="fake-model", messages=TASK, extra_headers=key)
        again = client.chat.completions.create(model="fake-model", messages=TASK, extra_headers=key)
        assert again.id == first.id and again.choices[0].message == first.choices[0].message
        assert chat_calls(upstream) == 1


def test_regenerating_or_editing_branches_instead_of_locking_the_conversation(tmp_path):
    with (
        FakeLLMServer(responder=numbered) as upstream,
        serve(tmp_path, upstream) as server,
    ):
        client = openai_client(server, "branching")
        first = reply_of(client.chat.completions.create(model="fake-model", messages=TASK))
        history: Any = [*TASK, first, {"role": "user", "content": "Now three even ones."}]
        client.chat.completions.create(model="fake-model", messages=history)
        # Regenerate the first reply (it was delivered: this is a new request, not a retry).
        regenerated = reply_of(client.chat.completions.create(model="fake-model", messages=TASK))
        assert chat_calls(upstream) == 3
        # The regenerated branch goes on, and so does an edit of its last user message.
        branch: Any = [*TASK, regenerated, {"role": "user", "content": "And two more?"}]
        client.chat.completions.create(model="fake-model", messages=branch)
        edited: Any = [*TASK, regenerated, {"role": "user", "content": "And four more?"}]
        assert client.chat.completions.create(model="fake-model", messages=edited).choices
        # Regenerating on the original line is served too.
        client.chat.completions.create(model="fake-model", messages=history)
        assert chat_calls(upstream) == 6
        sent = [r.body["messages"] for r in upstream.requests if r.path == "/v1/chat/completions"]
        assert sent[2] == TASK  # the regenerated call saw the history up to the branch point only
        assert sent[4][-1]["content"] == "And four more?" and "And two more?" not in str(sent[4])
        assert sent[5][-1]["content"] == "Now three even ones."
