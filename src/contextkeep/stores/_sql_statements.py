"""The SQL store's frequent statements, built once per store with bound parameters.

Building a SQLAlchemy expression (`table.c.x == value`, coercions, the cache key) costs far
more than running the compiled statement: built per call, it was most of a SQLite call's
time. Built once here and run with parameters, each call reuses the compiled form (on a
SQLite file, even SQLAlchemy's execution path is skipped: see `_sql_inline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from contextkeep.stores._sql_inline import PREBUILT
from contextkeep.stores._sql_schema import Tables

__all__ = ["Statements"]


@dataclass(frozen=True, slots=True)
class Statements:
    """Parameters: `c` conversation id, `p` position, `k` kind, `s` scope, `v` version, `n` limit."""

    message_at: sa.Select[Any]
    insert_messages: sa.Insert
    messages_from: sa.Select[Any]
    messages_from_limited: sa.Select[Any]
    count_messages: sa.Select[Any]
    document: sa.Select[Any]
    insert_document: sa.Insert
    update_document: sa.Update
    """Sets `new_version` and `new_body` where the stored version is `v`."""

    @classmethod
    def of(cls, tables: Tables) -> Statements:
        """The statements over `tables`."""
        messages, documents = tables.messages, tables.documents
        conversation = messages.c.conversation_id == sa.bindparam("c")
        key = (
            documents.c.conversation_id == sa.bindparam("c"),
            documents.c.kind == sa.bindparam("k"),
            documents.c.scope == sa.bindparam("s"),
        )
        messages_from = (
            sa.select(messages.c.body)
            .where(conversation, messages.c.position >= sa.bindparam("p"))
            .order_by(messages.c.position)
        )
        built = cls(
            message_at=sa.select(sa.literal(1)).where(conversation, messages.c.position == sa.bindparam("p")),
            insert_messages=sa.insert(messages),
            messages_from=messages_from,
            messages_from_limited=messages_from.limit(sa.bindparam("n", type_=sa.Integer)),
            count_messages=sa.select(sa.func.count()).where(conversation),
            document=sa.select(documents.c.version, documents.c.body).where(*key),
            insert_document=sa.insert(documents),
            update_document=sa.update(documents)
            .where(*key, documents.c.version == sa.bindparam("v"))
            .values(version=sa.bindparam("new_version"), body=sa.bindparam("new_body")),
        )
        # Marked for the SQLite fast path (`_sql_inline`); other dialects ignore the option.
        return cls(*(getattr(built, f).execution_options(**{PREBUILT: True}) for f in cls.__slots__))
