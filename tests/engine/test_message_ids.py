"""Message ids are unique per conversation, whether a caller gave them or the session did."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextkeep import MalformedHistoryError, Message
from support import manager


async def test_an_automatic_id_never_reuses_one_a_caller_gave(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    async with cm.session("c") as s:
        await s.add([Message("system", "rules"), Message("user", "task", id="m000002")])
        await s.add([Message("user", "more"), Message("user", "and more")])  # positions 2 and 3
        ids = [m.id for m in s.transcript]
        assert len(set(ids)) == len(ids) == 4
        assert ids[2] == "m000002.1" and ids[3] == "m000003"
    async with cm.session("c") as again:  # a reloaded session assigns the same way
        await again.add([Message("user", "last")])
        assert again.transcript[-1].id == "m000004"


async def test_a_caller_id_that_an_automatic_one_took_is_refused(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    async with cm.session("c") as s:
        await s.add([Message("system", "rules"), Message("user", "task")])  # m000000, m000001
        with pytest.raises(MalformedHistoryError, match="m000001"):
            await s.add([Message("user", "again", id="m000001")])
        assert len(s.transcript) == 2  # nothing stored
