"""A history that stops before the latest reply is a retry or a branch, even when replies read the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextkeep._errors import HistoryDivergedError
from support import manager

SYSTEM = {"role": "system", "content": "You are a careful agent."}
OK = {"role": "assistant", "content": "ok"}


async def test_a_retry_is_not_read_as_a_continuation_of_an_earlier_identical_reply(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    async with cm.session("c") as s:
        first = [SYSTEM, {"role": "user", "content": "start"}]
        await s.sync(first)
        await s.record(OK)
        second = [*first, OK, {"role": "user", "content": "go on"}]
        await s.sync(second)
        await s.record(OK)  # the same words as the first reply
        # The client never got the second reply and sends its request again.
        with pytest.raises(HistoryDivergedError):
            await s.sync(second)
        assert len(s.transcript) == 5  # "go on" is not appended a second time
        # A client that trimmed its history still continues after the latest reply.
        assert [m.text for m in await s.sync([OK, {"role": "user", "content": "next"}])] == ["next"]
