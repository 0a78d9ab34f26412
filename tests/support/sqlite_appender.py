"""A process that appends to a SQLite store through a session and prints what was acknowledged.

Run as `python tests/support/sqlite_appender.py STORE_URL CONVERSATION`. Each step adds one
message and then saves a state document; a line goes to stdout only *after* the store
acknowledged the write (`m <id>` for a message, `d <version>` for the document), so whatever
the parent read was acknowledged. It runs until killed.
"""

from __future__ import annotations

import asyncio
import os
import sys

from contextkeep import ContextManager, ModelSpec


def _acknowledge(kind: str, value: object) -> None:
    # One write(2) per line: a pipe write under PIPE_BUF is atomic, so a kill never leaves
    # half a line for the parent to misread (a buffered print may split a line across flushes).
    os.write(1, f"{kind} {value}\n".encode())


async def main(url: str, conversation: str) -> None:
    cm = ContextManager(ModelSpec("test-model", 1_000_000), store=url, tokenizer="heuristic")
    store = cm.store
    async with cm.session(conversation) as s:
        step = len(s.transcript)
        while True:
            (stored,) = await s.add([{"role": "user", "content": f"step {step}"}])
            _acknowledge("m", stored.id)
            doc = await store.load_document(conversation, "progress")
            if await store.save_document(
                conversation, "progress", {"step": step}, expected_version=doc.version
            ):
                _acknowledge("d", doc.version + 1)
            step += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
