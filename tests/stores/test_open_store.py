"""`open_store` and `default_store_url`: which store a URL opens, and the errors for bad URLs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from contextkeep._errors import ConfigError
from contextkeep.stores import (
    MemoryStore,
    RedisStore,
    SQLStore,
    Store,
    _sql_schema,
    default_store_url,
    migrate,
    open_store,
)
from stores.store_backends import msgs


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
