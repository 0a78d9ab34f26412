"""`contextkeep migrate --store URL`: creates or upgrades a schema, prints the version, exit 2 on errors."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from contextkeep._cli.migrate import migrate
from contextkeep._messages import Message
from contextkeep.stores import _sql_schema, open_store


def run(*args: str):
    return CliRunner().invoke(migrate, list(args))


async def _append_and_load(url: str) -> list[Message]:
    store = open_store(url)
    try:
        assert await store.append("c", [Message("user", "kept")], expected_length=0)
        return await store.load_messages("c")
    finally:
        await store.close()


def test_migrate_creates_then_upgrades_a_schema(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'ck.db'}?table_prefix=m_&auto_migrate=false"
    version = len(_sql_schema.MIGRATIONS)
    result = run("--store", url)
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"schema version {version}\n", "")
    assert asyncio.run(_append_and_load(url)) == [Message("user", "kept")]  # usable without auto_migrate
    assert run("--store", url).stdout == f"schema version {version}\n"  # idempotent

    async def add_kind_index(conn, tables):
        await conn.run_sync(sa.Index(f"{tables.documents.name}_kind", tables.documents.c.kind).create)

    monkeypatch.setattr(_sql_schema, "MIGRATIONS", [*_sql_schema.MIGRATIONS, add_kind_index])
    result = run("--store", url)
    assert (result.exit_code, result.stdout) == (0, f"schema version {version + 1}\n")


def test_migrate_of_a_memory_store_has_no_schema() -> None:
    assert run("--store", "memory://").stdout == "schema version 0\n"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("wat://somewhere", "error: store: unknown scheme in 'wat://somewhere'"),
        ("sqlite:///x.db?key_prefix=k:", "error: store: sqlite:// does not take key_prefix"),
        ("postgresql://postgres@127.0.0.1:1/test", "error: "),  # nothing listens on port 1
    ],
)
def test_migrate_reports_errors_on_stderr_with_exit_2(url: str, message: str) -> None:
    result = run("--store", url)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(message)


def test_migrate_needs_a_store() -> None:
    result = run()
    assert result.exit_code == 2  # click's usage error
    assert "--store" in result.stderr
