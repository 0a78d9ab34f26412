"""Idempotent appends: a retried batch that is already stored is acknowledged, not stored twice.

When the reply to an append is lost after the store committed it (a dropped connection, a
timeout during COMMIT, redis-py resending a script), the caller cannot tell whether the batch
is stored; it retries with the same expectation, which now fails the compare-and-set. The
batch's idempotency key is what it would occupy: its position (the `expected_length` it
expects) and each message's id and content hash. If the transcript holds exactly those
messages from that position on, the earlier attempt won, and the retry reports success.
Transcripts are append-only and ids unique per conversation, so the check cannot go stale
and cannot mistake another writer's batch for this one: a racing instance that appended
different messages, or the same content under other ids, still loses.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextkeep._messages import Message
from contextkeep.stores.base import Store

__all__ = ["already_stored", "same_batch"]


def same_batch(stored: Sequence[Message], batch: Sequence[Message]) -> bool:
    """Whether `stored` (read from the batch's position) is `batch`: the same ids and contents."""
    return len(stored) == len(batch) and all(
        s.id == m.id and s.key == m.key for s, m in zip(stored, batch, strict=True)
    )


async def already_stored(
    store: Store, conversation_id: str, batch: Sequence[Message], expected_length: int
) -> bool:
    """After a lost compare-and-set: whether `batch` already sits at `expected_length` in `store`."""
    if not batch or expected_length < 0:
        return False
    stored = await store.load_messages(conversation_id, after=expected_length, limit=len(batch))
    return same_batch(stored, batch)
