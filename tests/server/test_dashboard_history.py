"""The read endpoints the dashboard replays a conversation's past from: activity order and history."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

import support.proxy_loop as proxy
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support.dashboard_data import MODEL, WINDOW, agent_run

pytestmark = pytest.mark.slow  # two 20-step agent runs


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """Two finished conversations: `aaa-older` worked first, `zzz-newer` after it."""
    tmp = tmp_path_factory.mktemp("history")
    store, workspace = f"sqlite:///{tmp / 'ck.db'}", tmp / "ws"
    asyncio.run(agent_run(store, workspace, "aaa-older", 20))
    asyncio.run(agent_run(store, workspace, "zzz-newer", 20))
    settings = ServerSettings(store=store, workspace=str(workspace), model=MODEL, window=WINDOW)
    with BackgroundServer(create_app(settings)) as server, httpx.Client(base_url=server.url) as client:
        yield client


def test_recent_order_puts_the_conversation_worked_on_last_first(served: httpx.Client) -> None:
    listed = served.get("/api/conversations", params={"order": "recent"}).json()
    assert [c["id"] for c in listed] == ["zzz-newer", "aaa-older"]
    assert listed[0]["active_at"] > listed[1]["active_at"] > 0
    assert not listed[0]["live"]
    plain = served.get("/api/conversations").json()  # the store's order, unchanged
    assert [c["id"] for c in plain] == ["aaa-older", "zzz-newer"]
    assert served.get("/api/conversations", params={"order": "newest"}).status_code == 422


def test_history_holds_the_lines_the_savings_and_the_past_events(served: httpx.Client) -> None:
    h = served.get("/api/conversations/zzz-newer/history").json()
    assert h["window"] == WINDOW
    assert h["capacity_source"] == "explicit"
    assert h["budget"] == WINDOW - h["reserved_output"]
    assert 0 < h["target"] < h["trigger"] < h["budget"]
    compactions = served.get("/api/conversations/zzz-newer/compactions").json()["records"]
    assert compactions, "the workload compacts"
    types = [e["type"] for e in h["events"]]
    assert types.count("context.compression.completed") == len(compactions)
    assert types[-1] == "context.status"
    assert "model.completed" in types
    assert all(e["data"]["replayed"] and e["data"]["conversation_id"] == "zzz-newer" for e in h["events"])
    by_layer: dict[str, int] = {}
    for r in compactions:
        by_layer[r["layer"]] = by_layer.get(r["layer"], 0) + r["tokens_before"] - r["tokens_after"]
    assert {k: v for k, v in h["saved"].items() if k != "L0"} == by_layer
    assert h["saved"]["L0"] > 0  # every log is over the ingest limit
    # Nothing was proxied here: the chart draws each compaction's before and after, then the next view.
    chart = h["chart"]
    assert chart["unit"] == "compaction"
    assert len(chart["points"]) == 2 * len(compactions) + 1
    assert chart["points"][-1]["tokens"] == h["view_tokens"] > 0
    assert [m["layer"] for m in chart["markers"]] == [r["layer"] for r in compactions]
    assert chart["points"][chart["markers"][0]["at"]]["tokens"] == compactions[0]["tokens_after"]


def test_history_of_an_unknown_conversation_is_404(served: httpx.Client) -> None:
    missing = served.get("/api/conversations/nobody/history")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "no conversation 'nobody'"}  # not an unknown route


def test_proxied_calls_are_the_chart_and_the_live_one_comes_first(tmp_path: Path) -> None:
    with (
        FakeLLMServer(model=proxy.MODEL, context_window=proxy.WINDOW, responder=proxy.agent_step) as upstream,
        proxy.serve(tmp_path, upstream) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        proxy.run_agent(server, "proxied", 40)
        asyncio.run(agent_run(f"sqlite:///{tmp_path / 'ck.db'}", tmp_path / "ws", "zzz-elsewhere", 20))
        h = client.get("/api/conversations/proxied/history").json()
        assert h["capacity_source"] == "upstream"  # the upstream's /v1/models figure
        chart = h["chart"]
        assert chart["unit"] == "call"
        assert [p["call"] for p in chart["points"]] == list(range(1, 41))
        sent = client.get("/api/conversations/proxied/calls").json()
        assert [p["tokens"] for p in chart["points"]] == [c["tokens"] for c in sent]
        records = client.get("/api/conversations/proxied/compactions").json()["records"]
        assert len(chart["markers"]) == len(records) > 0
        listed = client.get("/api/conversations", params={"order": "recent"}).json()
        assert [(c["id"], c["live"]) for c in listed] == [("proxied", True), ("zzz-elsewhere", False)]
