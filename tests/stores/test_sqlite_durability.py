"""The default SQLite store under SIGKILL (#20): nothing acknowledged is lost or duplicated.

The store runs in WAL mode with `synchronous=NORMAL`: a commit is in the WAL file (the
operating system's page cache) before the call returns, so killing the process loses
nothing the store acknowledged. A child process appends through a session and saves a state
document, printing each acknowledged write; the test kills it at a random moment (after a
random number of acknowledgements), restarts it on the same file, and so on; then it reopens
the store and finds every acknowledged message exactly once, in order.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from contextkeep.stores import open_store
from support import REPO

pytestmark = pytest.mark.slow

APPENDER = REPO / "tests" / "support" / "sqlite_appender.py"
KILLS = 4


def _run_until_killed(url: str, conversation: str, acknowledged: int, err: Path) -> list[tuple[str, str]]:
    """Start an appender, read `acknowledged` acknowledgements (plus a random few), SIGKILL it."""
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(APPENDER), url, conversation], stdout=subprocess.PIPE, stderr=stderr
        )
    assert proc.stdout is not None
    seen: list[tuple[str, str]] = []
    try:
        while len(seen) < acknowledged:
            line = proc.stdout.readline().decode()
            assert line, f"the appender stopped: {err.read_text()[-2000:]}"
            kind, value = line.split()
            seen.append((kind, value))
        proc.send_signal(signal.SIGKILL)  # wherever it is: mid-transaction, mid-commit, between writes
        assert proc.wait(60) == -signal.SIGKILL
        # Printed before the kill landed: a line without its newline was cut by the kill.
        for line in proc.stdout.read().decode().splitlines(keepends=True):
            if line.endswith("\n"):
                kind, value = line.split()
                seen.append((kind, value))
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    return seen


async def test_every_acknowledged_write_survives_sigkill_once(tmp_path: Path) -> None:
    path = tmp_path / "contextkeep.db"
    url = f"sqlite:///{path}"
    rng = random.Random()
    acked: list[tuple[str, str]] = []
    for n in range(KILLS):
        acked += _run_until_killed(url, "conv", rng.randint(5, 120), tmp_path / f"run{n}.err")

    mode = sqlite3.connect(path)
    try:
        assert mode.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        mode.close()
    store = open_store(url)
    try:
        stored = [m.id for m in await store.load_messages("conv")]
        doc = await store.load_document("conv", "progress")
    finally:
        await store.close()
    acked_ids = [value for kind, value in acked if kind == "m"]
    assert len(stored) == len(set(stored))  # nothing twice
    missing = [i for i in acked_ids if i not in set(stored)]
    assert missing == []  # nothing acknowledged lost
    # In order, with at most one unacknowledged write per kill after an acknowledged one.
    assert [i for i in stored if i in set(acked_ids)] == acked_ids
    assert len(stored) - len(acked_ids) <= KILLS
    versions = [int(value) for kind, value in acked if kind == "d"]
    assert doc.version >= max(versions)
