"""The SQL store's compare-and-set writes, as statements for a transaction, and what each stores.

Each builder returns the work to run inside a transaction (it says whether the write's
expectation held) and the facts the write stores (see `_sql_known`), so one transaction can
hold several writes (`SQLStore.append_and_save`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from contextkeep._errors import StoreError
from contextkeep._messages import Message, message_json
from contextkeep.stores._sql_known import Touched
from contextkeep.stores._sql_schema import ID_LENGTH, KIND_LENGTH
from contextkeep.stores._sql_statements import Statements
from contextkeep.stores.base import DocumentWrite

__all__ = ["Stale", "Work", "appending", "check_length", "dumps", "saving"]

Work = Callable[[AsyncConnection], Awaitable[bool]]
"""The statements of one write, run inside a transaction: whether its expectation held."""


class Stale(Exception):
    """Raised inside a transaction of several writes when one expectation failed: rolls it back."""


def dumps(value: Any) -> str:
    # Compact and non-ASCII kept: smaller rows; control characters are still escaped,
    # so a NUL in a message cannot upset PostgreSQL's TEXT.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def check_length(what: str, value: str, limit: int) -> None:
    # SQLite ignores VARCHAR lengths; checking here keeps every dialect behaving alike.
    if len(value) > limit:
        raise StoreError(f"{what} is {len(value)} characters long; the SQL store accepts at most {limit}")


def appending(
    st: Statements, conversation_id: str, messages: Sequence[Message], expected_length: int
) -> tuple[Work, Touched]:
    """An append's statements (true when the expectation held) and what it stores if it wins."""
    check_length("conversation id", conversation_id, ID_LENGTH)
    rows = [
        {"conversation_id": conversation_id, "position": expected_length + i, "body": message_json(m)}
        for i, m in enumerate(messages)
    ]

    async def stored_at(conn: AsyncConnection, position: int) -> bool:
        return await conn.scalar(st.message_at, {"c": conversation_id, "p": position}) is not None

    async def work(conn: AsyncConnection) -> bool:
        if expected_length > 0 and not await stored_at(conn, expected_length - 1):
            return False  # fewer stored than expected
        if not rows:
            return not await stored_at(conn, expected_length)
        await conn.execute(st.insert_messages, rows)  # duplicate key: more stored than expected
        return True

    return work, Touched(length=(conversation_id, expected_length + len(rows)))


def saving(st: Statements, conversation_id: str, document: DocumentWrite) -> tuple[Work, Touched]:
    """A document save's statements (true when the expectation held) and what it stores if it wins."""
    check_length("conversation id", conversation_id, ID_LENGTH)
    check_length("document kind", document.kind, KIND_LENGTH)
    check_length("document scope", document.scope, ID_LENGTH)
    expected = document.expected_version
    body = dumps(dict(document.data))
    key = {"c": conversation_id, "k": document.kind, "s": document.scope}

    async def work(conn: AsyncConnection) -> bool:
        if expected == 0:  # the primary key refuses a second first save
            row = {"conversation_id": conversation_id, "kind": document.kind, "scope": document.scope}
            await conn.execute(st.insert_document, {**row, "version": 1, "body": body})
            return True
        update = {**key, "v": expected, "new_version": expected + 1, "new_body": body}
        return (await conn.execute(st.update_document, update)).rowcount == 1

    stored = ((conversation_id, document.kind, document.scope), body, expected + 1)
    return work, Touched(document=stored)
