"""The server: REST endpoints, server-sent events (in-process and polled), bearer token, OpenAPI fuzzing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError
from contextkeep._events import ContextStatus
from contextkeep._manager import ContextManager
from contextkeep._usage import Usage
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support import SSECollector, rounds, types

CONV = "conv-1"


def make_manager(tmp_path: Path, store: str = "memory://") -> ContextManager:
    return ContextManager(
        ModelSpec("test-model", 4000),
        config=ContextConfig(min_keep_tokens=0),
        store=store,
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
    )


async def fill(m: ContextManager, conversation: str = CONV, steps: int = 12, *, close: bool = False) -> None:
    """A tool-using conversation long enough to be compacted, with confirmed usage; `close`: then close `m`.

    Closing in the same event loop matters: a store's connections belong to the loop that opened them.
    """
    async with m.session(conversation) as s:
        if not s.transcript:
            await s.add(
                [{"role": "system", "content": "You are a tester."}, {"role": "user", "content": "go"}]
            )
        start = len(s.transcript)
        for i in range(start, start + steps):
            await s.add(rounds(1, size=1200, start=i))
            view = await s.prepare()
            await s.record({"role": "assistant", "content": f"step {i} done"}, Usage(view.tokens, 5))
    if close:
        await m.close()


@pytest.fixture
async def client(tmp_path):
    m = make_manager(tmp_path)
    await fill(m)
    app = create_app(ServerSettings(), manager=m)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        yield c


async def test_usage_lists_every_scope_that_recorded_a_call(tmp_path: Path) -> None:
    m = make_manager(tmp_path)
    await fill(m, steps=2)
    async with m.session(CONV, agent_id="reviewer", agent_version="3") as s:  # another agent, same chat
        await s.add({"role": "user", "content": "review it"})
        view = await s.prepare()
        await s.record({"role": "assistant", "content": "looks fine"}, Usage(view.tokens, 7))
    app = create_app(ServerSettings(), manager=m)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        scopes = (await c.get(f"/api/conversations/{CONV}/usage")).json()
        assert (await c.get("/api/conversations/nope/usage")).status_code == 404
    assert [(u["scope"], u["served"]) for u in scopes] == [
        ("default|0|test-model", True),
        ("reviewer|3|test-model", False),
    ]
    assert scopes[1]["output_tokens"] == 7 and scopes[1]["status"] == "CONFIRMED_BASELINE"
    assert scopes[1]["baseline"] == view.tokens + 7


async def test_conversations_status_and_view(client):
    listed = (await client.get("/api/conversations")).json()
    assert [c["id"] for c in listed] == [CONV]
    status = (await client.get(f"/api/conversations/{CONV}/status")).json()
    assert status["context"]["type"] == "context.status"
    assert status["context"]["state"] in ("normal", "warning")
    assert status["usage"]["status"] == "CONFIRMED_BASELINE"
    assert status["usage"]["ui_text"].startswith("last confirmed ")
    assert status["compactions"] >= 1
    view = (await client.get(f"/api/conversations/{CONV}/view")).json()
    kinds = {m["kind"] for m in view["messages"]}
    assert kinds & {"summary", "dropped", "masked"}, kinds
    assert view["tokens"] == status["context"]["used"]
    assert any(m["references"] for m in view["messages"])


async def test_compactions_and_transcript_pages(client):
    records = (await client.get(f"/api/conversations/{CONV}/compactions")).json()["records"]
    assert records and all(r["tokens_after"] < r["tokens_before"] for r in records)
    first = (await client.get(f"/api/conversations/{CONV}/messages", params={"limit": 5})).json()
    assert len(first["messages"]) == 5 and first["next"] == 5
    rest = (await client.get(f"/api/conversations/{CONV}/messages", params={"after": 5, "limit": 500})).json()
    assert rest["next"] is None and 5 + len(rest["messages"]) == first["total"]
    assert (await client.get(f"/api/conversations/{CONV}/messages", params={"limit": 0})).status_code == 422
    assert (await client.get("/api/conversations/nope/status")).status_code == 404


async def test_references_open_and_refuse_leaving_the_workspace(client, tmp_path):
    view = (await client.get(f"/api/conversations/{CONV}/view")).json()
    ref = next(r for m in view["messages"] for r in m["references"])
    opened = await client.get(f"/api/conversations/{CONV}/references/{ref}")
    assert opened.status_code == 200 and opened.text
    (tmp_path / "secret.txt").write_text("top secret")
    for bad in ("%2E%2E/secret.txt", "sessions/%2E%2E/%2E%2E/%2E%2E/secret.txt", "%2Fetc/passwd"):
        refused = await client.get(f"/api/conversations/{CONV}/references/{bad}")
        assert refused.status_code == 400, (bad, refused.text)
        assert "top secret" not in refused.text
    assert (
        await client.get(f"/api/conversations/{CONV}/references/sessions/{CONV}/none.txt")
    ).status_code == 404


async def test_bearer_token_protects_everything(tmp_path):
    app = create_app(ServerSettings(token="s3cret"), manager=make_manager(tmp_path))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        for path in ("/api/conversations", "/openapi.json", "/", "/app.js", "/api/events"):
            assert (await c.get(path)).status_code == 401, path
        assert (
            await c.get("/api/conversations", headers={"Authorization": "Bearer wrong"})
        ).status_code == 401
        ok = await c.get("/api/conversations", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        login = await c.get("/", params={"token": "s3cret"})
        assert login.status_code == 303 and "httponly" in login.headers["set-cookie"].lower()
        assert (await c.get("/")).status_code == 200  # the cookie now authorizes the browser
        assert "<title>contextkeep</title>" in (await c.get("/")).text


def test_non_loopback_binding_requires_a_token():
    with pytest.raises(ConfigError):
        create_app(ServerSettings(host="0.0.0.0"))
    create_app(ServerSettings(host="0.0.0.0", token="t", store="memory://"))


@pytest.mark.slow
def test_events_in_process_live_and_cross_process_by_polling(tmp_path):
    url = f"sqlite:///{tmp_path / 'ck.db'}"
    served = make_manager(tmp_path, url)
    app = create_app(ServerSettings(poll_interval=0.1), manager=served)
    with BackgroundServer(app) as server, SSECollector(f"{server.url}/api/events") as stream:
        # Another process (here: another manager on the same store) works on a conversation.
        writer = make_manager(tmp_path, url)
        asyncio.run(fill(writer, "other", steps=14, close=True))
        events = stream.wait_for(
            lambda ev: {"context.compression.completed", "model.completed"} <= set(types(ev))
        )
        polled = [d for t, d in events if t == "context.status"]
        assert polled and all(d["synthesized"] and d["conversation_id"] == "other" for d in polled)
        # An event emitted in the server's own process is forwarded as it is.
        served.events.emit(
            ContextStatus(conversation_id=CONV, used=1, budget=10, ratio=0.1, state=None, remaining=9)
        )
        live = stream.wait_for(lambda ev: any(d["conversation_id"] == CONV for _, d in ev))
        assert next(d for _, d in live if d["conversation_id"] == CONV)["synthesized"] is False
    second = BackgroundServer(create_app(ServerSettings(), manager=served))
    with second as server, SSECollector(f"{server.url}/api/conversations/{CONV}/events") as stream:
        served.events.emit(
            ContextStatus(
                conversation_id="other", used=1, budget=None, ratio=None, state=None, remaining=None
            )
        )
        served.events.emit(
            ContextStatus(conversation_id=CONV, used=2, budget=None, ratio=None, state=None, remaining=None)
        )
        events = stream.wait_for(lambda ev: len(ev) >= 1)
        assert [d["used"] for _, d in events] == [2]
    asyncio.run(served.close())  # the app does not own a manager it was given


@pytest.mark.slow
def test_openapi_fuzzing_finds_no_server_error(tmp_path):
    """Schemathesis generates requests for every documented operation (event streams excepted)."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.checks import not_a_server_error

    m = make_manager(tmp_path)
    asyncio.run(fill(m, steps=4))
    with FakeLLMServer(context_window=4000) as upstream:
        app = create_app(ServerSettings(upstream=upstream.base_url), manager=m)
        with BackgroundServer(app) as server:
            schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json").exclude(path_regex="events$")
            operations = [result.ok() for result in schema.get_all_operations()]
            assert len(operations) >= 8
            for operation in operations:

                @given(case=operation.as_strategy())
                @settings(
                    max_examples=30,
                    deadline=None,
                    database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
                def check(case):
                    case.call_and_validate(base_url=server.url, checks=[not_a_server_error])

                check()
