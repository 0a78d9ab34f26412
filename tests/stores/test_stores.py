"""The store contract, run against every backend: memory, SQLite, PostgreSQL, MariaDB, Redis.

Each test gets its own table / key prefix and conversation ids, and drops what it
made. Server backends skip when the server is unreachable (and fail in CI).
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from contextkeep._errors import ConfigError, SchemaVersionError, StoreError
from contextkeep._messages import FilePart, ImagePart, Message, TextPart, ToolCall
from contextkeep.stores import (
    Document,
    MemoryStore,
    RedisStore,
    SQLStore,
    Store,
    _sql_schema,
    default_store_url,
    migrate,
    open_store,
)
from stores.store_backends import PERSISTENT, SQL, Backend, conv, msgs, unique
from support import backends, wait_until

# -- transcript ----------------------------------------------------------------------------


async def test_append_load_page_count(backend: Backend, store: Store):
    c = conv()
    assert await store.count_messages(c) == 0
    assert await store.load_messages(c) == []
    assert await store.append(c, msgs("a", "b", "c"), expected_length=0)
    assert await store.append(c, msgs("d", "e"), expected_length=3)
    everything = msgs("a", "b", "c", "d", "e")
    assert await store.count_messages(c) == 5
    assert await store.load_messages(c) == everything
    assert await store.load_messages(c, after=2) == everything[2:]
    assert await store.load_messages(c, after=1, limit=2) == everything[1:3]
    assert await store.load_messages(c, after=4, limit=10) == everything[4:]
    assert await store.load_messages(c, after=5) == []
    assert await store.load_messages(c, limit=0) == []
    # Another instance on the same data sees the same transcript.
    other = backend.reopen(store)
    assert await other.load_messages(c) == everything
    assert await other.count_messages(conv()) == 0


async def test_stale_append_returns_false_and_writes_nothing(store: Store):
    c = conv()
    assert await store.append(c, msgs("a", "b"), expected_length=0)
    assert not await store.append(c, msgs("x", "y"), expected_length=0)  # behind
    assert not await store.append(c, msgs("x"), expected_length=1)  # behind, overlapping
    assert not await store.append(c, msgs("x"), expected_length=5)  # ahead: would leave a gap
    assert not await store.append(c, [], expected_length=1)
    assert await store.append(c, [], expected_length=2)
    assert await store.load_messages(c) == msgs("a", "b")
    assert await store.append(c, msgs("c"), expected_length=2)
    assert await store.count_messages(c) == 3


async def test_concurrent_appends_exactly_one_wins(backend: Backend, store: Store):
    c = conv()
    instances = [store, backend.reopen(store)]
    batches = [msgs(f"w{i}-1", f"w{i}-2") for i in range(10)]
    results = await asyncio.gather(
        *(instances[i % 2].append(c, batch, expected_length=0) for i, batch in enumerate(batches))
    )
    assert results.count(True) == 1
    assert await store.load_messages(c) == batches[results.index(True)]
    # The next round races on the new length.
    results = await asyncio.gather(
        *(instances[i % 2].append(c, msgs(str(i)), expected_length=2) for i in range(10))
    )
    assert results.count(True) == 1
    assert await store.count_messages(c) == 3


async def test_messages_survive_exactly(backend: Backend, store: Store):
    c = conv()
    original = [
        Message("system", 'Du bist ein Assistent. 你是助手 🤖 — עברית \u2028 NUL:\x00 tab:\t "quoted" \\'),
        Message(
            "user",
            (
                TextPart("Look at this 👀", {"cache_control": {"type": "ephemeral"}}),
                ImagePart("data:image/png;base64,iVBORw0KGgo=", "image/png", {"detail": "high"}),
                FilePart("https://example.com/report.pdf", "application/pdf", "report.pdf"),
            ),
            id="m-1",
            metadata={"ck_kind": "note", "nested": {"list": [1, 2.5, None, True, "ü"], "empty": {}}},
        ),
        Message(
            "assistant",
            None,
            tool_calls=(
                ToolCall("call_1", "search", '{"q": "北京 weather"}', {"index": 0}),
                ToolCall("call_2", "read", "{}"),
            ),
            reasoning="Думаю…",
            extra={"provider_field": {"x": [1, 2]}},
        ),
        Message("tool", '{"ok": true}', tool_call_id="call_1", name="search"),
        Message("tool", "x" * 200_000, tool_call_id="call_2", name="read"),  # beyond MySQL TEXT's 64 KiB
    ]
    assert await store.append(c, original, expected_length=0)
    for instance in (store, backend.reopen(store)):
        loaded = await instance.load_messages(c)
        assert loaded == original
        assert [m.key for m in loaded] == [m.key for m in original]


async def test_list_conversations(backend: Backend, store: Store):
    ids = ["Conv", "conv", "对话-1", "a}b", "a%7Db", "{x}"]
    for i, c in enumerate(ids):
        assert await store.append(c, msgs(str(i)), expected_length=0)
    assert await store.list_conversations() == sorted(ids)
    for i, c in enumerate(ids):  # ids that look alike stay apart
        assert await store.load_messages(c) == msgs(str(i))


async def test_failed_append_creates_no_conversation(store: Store):
    assert not await store.append("lost", msgs("x"), expected_length=3)
    assert await store.append("kept", msgs("x"), expected_length=0)
    assert await store.list_conversations() == ["kept"]


# -- documents -----------------------------------------------------------------------------


async def test_document_compare_and_set(backend: Backend, store: Store):
    c = conv()
    assert await store.load_document(c, "compaction") == Document({}, 0)
    assert await store.save_document(c, "compaction", {"summary": "one", "n": [1]}, expected_version=0)
    assert await store.load_document(c, "compaction") == Document({"summary": "one", "n": [1]}, 1)
    # Stale versions lose and write nothing.
    assert not await store.save_document(c, "compaction", {"summary": "stale"}, expected_version=0)
    assert not await store.save_document(c, "compaction", {"summary": "ahead"}, expected_version=2)
    assert await store.load_document(c, "compaction") == Document({"summary": "one", "n": [1]}, 1)
    assert await store.save_document(c, "compaction", {"summary": "two ✓"}, expected_version=1)
    assert await backend.reopen(store).load_document(c, "compaction") == Document({"summary": "two ✓"}, 2)
    # Kind and scope address separate documents.
    assert await store.load_document(c, "compaction", "agent-a") == Document({}, 0)
    assert await store.save_document(c, "usage", {"tokens": 10}, expected_version=0, scope="agent-a|m1")
    assert await store.save_document(c, "usage", {"tokens": 20}, expected_version=0, scope="agent-b|m1")
    assert await store.load_document(c, "usage", "agent-a|m1") == Document({"tokens": 10}, 1)
    assert await store.load_document(c, "usage", "agent-b|m1") == Document({"tokens": 20}, 1)
    assert await store.load_document(c, "usage") == Document({}, 0)
    assert await store.load_document(conv(), "compaction") == Document({}, 0)


async def test_list_scopes_names_each_saved_document_of_a_kind(backend: Backend, store: Store):
    c, other = conv(), conv()
    assert await store.list_scopes(c, "usage") == []
    for scope in ("b|1|m", "a|1|m", "odd } % [*]? scope"):
        assert await store.save_document(c, "usage", {"n": 1}, expected_version=0, scope=scope)
    assert await store.save_document(c, "usage", {"n": 2}, expected_version=1, scope="a|1|m")  # no repeat
    assert not await store.save_document(c, "usage", {"n": 3}, expected_version=5, scope="never|saved|m")
    assert await store.save_document(c, "compaction", {}, expected_version=0)
    assert await store.save_document(other, "usage", {}, expected_version=0, scope="z|1|m")
    expected = sorted(["a|1|m", "b|1|m", "odd } % [*]? scope"])
    assert await backend.reopen(store).list_scopes(c, "usage") == expected
    assert await store.list_scopes(c, "compaction") == [""]
    assert await store.list_scopes(other, "usage") == ["z|1|m"]


@pytest.mark.parametrize("backend", backends("redis"), indirect=True)
async def test_a_layout_1_redis_store_indexes_its_documents_on_first_use(backend: Backend):
    url = backend.url()
    store = backend.open(url)
    c = "conv } with % braces"
    assert await store.save_document(c, "usage", {"n": 1}, expected_version=0, scope="agent|1|m")
    assert isinstance(store, RedisStore)
    # What layout 1 held: the document without its scope set.
    await store.client.delete(store._scopes_key(c, "usage"))
    await _force_version(store, 1)
    upgraded = backend.open(url)
    assert await upgraded.list_scopes(c, "usage") == ["agent|1|m"]
    version = await store.client.get(f"{store.key_prefix}schema_version")
    assert version is not None and int(version) == 2


async def test_concurrent_document_saves_one_wins_per_version(backend: Backend, store: Store):
    c = conv()
    instances = [store, backend.reopen(store)]
    for version in (0, 1, 2):
        results = await asyncio.gather(
            *(
                instances[i % 2].save_document(c, "compaction", {"writer": i}, expected_version=version)
                for i in range(10)
            )
        )
        assert results.count(True) == 1
        assert await store.load_document(c, "compaction") == Document(
            {"writer": results.index(True)}, version + 1
        )


# -- leases --------------------------------------------------------------------------------


async def test_leases(backend: Backend, store: Store):
    c = conv()
    other = backend.reopen(store)
    assert await store.acquire_lease(c, "summary", "alice", 10_000)
    assert not await other.acquire_lease(c, "summary", "bob", 10_000)
    assert await store.acquire_lease(c, "summary", "alice", 10_000)  # renew
    assert await other.acquire_lease(c, "other-lease", "bob", 10_000)  # names are separate
    assert await other.acquire_lease(conv(), "summary", "bob", 10_000)  # conversations too
    await other.release_lease(c, "summary", "bob")  # not the owner: no effect
    assert not await other.acquire_lease(c, "summary", "bob", 10_000)
    await store.release_lease(c, "summary", "alice")
    assert await other.acquire_lease(c, "summary", "bob", 10_000)
    assert not await store.acquire_lease(c, "summary", "alice", 10_000)


async def test_lease_expiry_takeover_and_renewal(backend: Backend, store: Store):
    c = conv()
    other = backend.reopen(store)
    assert await store.acquire_lease(c, "summary", "alice", 100)
    first_expired = time.monotonic() + 0.1 + 0.05  # the store's own clock may lag a little
    assert await store.acquire_lease(c, "summary", "alice", 60_000)  # renewal extends the expiry
    await wait_until(lambda: time.monotonic() > first_expired)
    assert not await other.acquire_lease(c, "summary", "bob", 10_000)  # past the first ttl, still held
    assert await store.acquire_lease(c, "summary", "alice", 100)  # renewed again, now short
    # Expired: taken over (each refused attempt leaves the lease as it was).
    await wait_until(lambda: other.acquire_lease(c, "summary", "bob", 10_000))
    assert not await store.acquire_lease(c, "summary", "alice", 10_000)


# -- isolation, schema, errors ---------------------------------------------------------------


@pytest.mark.parametrize("backend", PERSISTENT, indirect=True)
async def test_prefixes_isolate(backend: Backend):
    a, b = backend.open(), backend.open()
    c = "shared-id"
    assert await a.append(c, msgs("in a"), expected_length=0)
    assert await b.count_messages(c) == 0
    assert await b.list_conversations() == []
    assert await b.append(c, msgs("in b", "b2"), expected_length=0)
    assert await a.load_messages(c) == msgs("in a")
    assert await a.save_document(c, "compaction", {"in": "a"}, expected_version=0)
    assert await b.load_document(c, "compaction") == Document({}, 0)
    assert await a.acquire_lease(c, "summary", "alice", 10_000)
    assert await b.acquire_lease(c, "summary", "bob", 10_000)


async def _force_version(store: Store, version: int) -> None:
    """Write a schema version into the store as another contextkeep would."""
    if isinstance(store, RedisStore):
        await store.client.set(f"{store.key_prefix}schema_version", version)
        return
    assert isinstance(store, SQLStore)
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.text(f"UPDATE {store.table_prefix}schema_version SET version = :v"), {"v": version}
        )


@pytest.mark.parametrize("backend", PERSISTENT, indirect=True)
async def test_newer_schema_is_refused(backend: Backend):
    url = backend.url()
    store = backend.open(url)
    assert await store.append("c", msgs("a"), expected_length=0)  # creates the schema
    await _force_version(store, 99)
    newer = backend.open(url)
    with pytest.raises(SchemaVersionError, match="99") as caught:
        await newer.load_messages("c")
    assert "newer" in str(caught.value)
    assert "contextkeep migrate --store" in str(caught.value)
    with pytest.raises(SchemaVersionError):
        await migrate(url)  # migrate never downgrades


@pytest.mark.parametrize("backend", SQL, indirect=True)
async def test_older_schema_needs_migrate_unless_auto(backend: Backend, monkeypatch: pytest.MonkeyPatch):
    prefix = unique("t")
    store = backend.open(backend.url(prefix))
    assert await store.append("c", msgs("kept"), expected_length=0)  # schema version 1

    async def add_kind_index(conn, tables):
        await conn.run_sync(sa.Index(f"{tables.documents.name}_kind", tables.documents.c.kind).create)

    monkeypatch.setattr(_sql_schema, "MIGRATIONS", [*_sql_schema.MIGRATIONS, add_kind_index])
    strict_url = backend.url(prefix, auto_migrate="false")
    with pytest.raises(SchemaVersionError, match="auto_migrate") as caught:
        await backend.open(strict_url).load_messages("c")
    assert "contextkeep migrate --store '" in str(caught.value)
    assert f"table_prefix={prefix}_" in str(caught.value)  # the command names this very store

    assert await migrate(strict_url) == 2
    upgraded = backend.open(strict_url)
    assert await upgraded.load_messages("c") == msgs("kept")
    assert isinstance(upgraded, SQLStore)
    async with upgraded.engine.connect() as conn:
        indexes = await conn.run_sync(lambda sync: sa.inspect(sync).get_indexes(f"{prefix}_documents"))
        version = await conn.scalar(sa.text(f"SELECT version FROM {prefix}_schema_version"))
    assert f"{prefix}_documents_kind" in [i["name"] for i in indexes]
    assert version == 2

    # With auto_migrate (the default) an old schema is upgraded on first use.
    auto_prefix = unique("t")
    monkeypatch.setattr(_sql_schema, "MIGRATIONS", _sql_schema.MIGRATIONS[:1])
    assert await backend.open(backend.url(auto_prefix)).append("c", msgs("v1"), expected_length=0)
    monkeypatch.setattr(_sql_schema, "MIGRATIONS", [*_sql_schema.MIGRATIONS, add_kind_index])
    assert await backend.open(backend.url(auto_prefix)).load_messages("c") == msgs("v1")
    assert await migrate(backend.url(auto_prefix)) == 2  # already there: nothing to do


@pytest.mark.parametrize("backend", SQL, indirect=True)
async def test_sql_rejects_ids_it_cannot_store_alike(store: Store):
    with pytest.raises(StoreError, match="at most 255"):
        await store.append("x" * 256, msgs("a"), expected_length=0)
    assert await store.append("x" * 255, msgs("a"), expected_length=0)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2", "postgresql"),
        ("mysql://root@127.0.0.1:1/test?connect_timeout=2", "mysql"),
        ("redis://127.0.0.1:1/0?socket_connect_timeout=2", "redis"),
    ],
)
async def test_unreachable_server_raises_store_error(url: str, name: str):
    store = open_store(url)
    try:
        with pytest.raises(StoreError, match="failed on"):
            await store.count_messages("c")
    finally:
        await store.close()


# -- open_store ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "driver", "prefix"),
    [
        ("sqlite://", "sqlite+aiosqlite", "ck_"),
        ("sqlite:///relative/dir/state.db?table_prefix=app_", "sqlite+aiosqlite", "app_"),
        ("postgresql://u:secret@db.example:5433/ck?sslmode=disable", "postgresql+psycopg", "ck_"),
        ("postgres://u@db.example/ck?table_prefix=x_", "postgresql+psycopg", "x_"),
        ("postgresql+psycopg://u@db.example/ck", "postgresql+psycopg", "ck_"),
        ("mysql://root@db.example/ck", "mysql+aiomysql", "ck_"),
        ("mariadb://root@db.example/ck?table_prefix=m_&auto_migrate=false", "mysql+aiomysql", "m_"),
    ],
)
async def test_open_store_sql_urls(url: str, driver: str, prefix: str):
    store = open_store(url)
    try:
        assert isinstance(store, SQLStore)
        assert isinstance(store, Store)
        assert store.engine.url.drivername == driver
        assert store.table_prefix == prefix
        assert "table_prefix" not in store.engine.url.query
        assert "auto_migrate" not in store.engine.url.query
        assert "secret" not in repr(store)
        if "sslmode" in url:
            assert store.engine.url.query["sslmode"] == "disable"  # driver options pass through
    finally:
        await store.close()


async def test_open_store_memory_sqlite_memory_and_redis():
    assert isinstance(open_store("memory://"), MemoryStore)
    sqlite = open_store("sqlite://")
    redis = open_store("redis://127.0.0.1:6379/3?key_prefix=app:")
    try:
        assert await sqlite.append("c", msgs("a"), expected_length=0)
        assert await sqlite.load_messages("c") == msgs("a")
        assert isinstance(redis, RedisStore)
        assert redis.key_prefix == "app:"
        assert redis.client.connection_pool.connection_kwargs["db"] == 3
    finally:
        await sqlite.close()
        await redis.close()


@pytest.mark.parametrize(
    ("url", "key", "fragment"),
    [
        ("mongodb://localhost/x", "store", "accepted: memory://, sqlite://"),
        ("localhost:5432", "store", "redis://"),
        ("redis://localhost?table_prefix=x_", "store", "does not take table_prefix"),
        ("sqlite://?key_prefix=x", "store", "does not take key_prefix"),
        ("sqlite://?auto_migrate=maybe", "store", "auto_migrate"),
        ("sqlite://?table_prefix=drop-table", "store.table_prefix", "must match"),
        ("redis://localhost?key_prefix={tag}", "store.key_prefix", "braces"),
    ],
)
def test_open_store_rejects_bad_urls(url: str, key: str, fragment: str):
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert caught.value.key == key
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("postgresql://localhost/x", "psycopg", "contextkeep[postgres]"),
        ("mariadb://localhost/x", "aiomysql", "contextkeep[mysql]"),
        ("redis://localhost", "redis", "contextkeep[redis]"),
    ],
)
def test_open_store_names_the_missing_extra(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str, extra: str
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a)
    )
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert caught.value.key == "store"
    assert f"pip install '{extra}'" in str(caught.value)


async def test_default_store_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("CONTEXTKEEP_HOME", str(tmp_path / "home"))
    assert default_store_url() == f"sqlite:///{tmp_path / 'home' / 'contextkeep.db'}"
    monkeypatch.delenv("CONTEXTKEEP_HOME")
    monkeypatch.chdir(tmp_path)
    url = default_store_url()
    assert url == f"sqlite:///{tmp_path.resolve() / '.contextkeep' / 'contextkeep.db'}"
    store = open_store(url)
    try:
        assert await store.append("c", msgs("embedded"), expected_length=0)
    finally:
        await store.close()
    assert (tmp_path / ".contextkeep" / "contextkeep.db").is_file()
    assert await migrate(url) == _sql_schema.latest_version()
