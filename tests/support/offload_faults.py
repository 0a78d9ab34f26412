"""Offload faults made real in a child process: a file size limit cuts an append short.

Run as `python tests/support/offload_faults.py MODE SPEC_JSON`; it prints one JSON report.
`RLIMIT_FSIZE` makes the kernel do what a full disk does: the write that reaches the limit
is short, the next one fails with EFBIG, and SIGXFSZ is sent (a signal that kills by default).

- `append`: offload one batch of messages under the limit (`"sigxfsz": "kill"` leaves the
  default action, so the process dies inside the append with a torn line on disk; `"ignore"`
  lets the append fail).
- `session`: a conversation on an in-memory store compacts until an offload hits the limit
  (the disk is full), prepares again while it is still full, then the limit is lifted (space
  returns) and the conversation goes on; the report says what each state's references read back.
"""

from __future__ import annotations

import asyncio
import json
import resource
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import WorkspaceError
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import LocalWorkspace
from contextkeep._session import Session
from support.builders import rounds

WORKER = Path(__file__).resolve()


def batch(first: int, count: int, size: int) -> list[Message]:
    """`count` messages `m{first:04d}`..., each `size` characters (several make a multi-page append)."""
    return [Message("user", f"msg {i} " + "y" * size, id=f"m{i:04d}") for i in range(first, first + count)]


def limit_file_size(limit: int | None, *, kill: bool = False) -> None:
    """Cap every file this process writes at `limit` bytes (None: lift the cap); no core dumps."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard if limit is None else limit, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL if kill else signal.SIG_IGN)


async def append(spec: dict[str, Any]) -> dict[str, Any]:
    workspace = LocalWorkspace(spec["root"])
    limit_file_size(spec["limit"], kill=spec["sigxfsz"] == "kill")
    try:
        await workspace.offload_context(spec["session"], batch(spec["first"], spec["count"], spec["size"]))
    except WorkspaceError as exc:
        return {"error": str(exc)}
    return {"error": None}


async def session(spec: dict[str, Any]) -> dict[str, Any]:
    cm = ContextManager(
        ModelSpec("test-model", 3000),
        config=ContextConfig(reserved_tokens=0, min_keep_tokens=0),
        workspace=spec["root"],
        tokenizer="heuristic",
    )
    report: dict[str, Any] = {"error": None}
    async with cm.session("c") as s:
        await s.add([{"role": "system", "content": "You are a tester."}, {"role": "user", "content": "go"}])
        limit_file_size(spec["limit"])
        for step in range(spec["steps"]):
            await s.add(rounds(1, size=1200, start=step))
            try:
                await s.prepare()
            except WorkspaceError as exc:
                if report["error"] is None:  # the disk is full: the state must not move
                    version = s.state.version
                    report.update(error=str(exc), step=step, retried=await _retry(s))
                    report["saved_while_full"] = s.state.version != version
                    limit_file_size(None)  # space returns
                    await s.prepare()
                else:
                    raise
        report["spans"] = await _spans(cm, s)
    await cm.close()
    return report


async def _retry(s: Session) -> str:
    """Prepare once more while the disk is still full: what happened."""
    try:
        await s.prepare()
    except WorkspaceError as exc:
        return f"WorkspaceError: {exc}"
    return "prepared"


async def _spans(cm: ContextManager, s: Session) -> list[dict[str, Any]]:
    """Each `context.jsonl` span the saved state references: the ids it names and the ids it reads back."""
    ids = [m.id for m in s.transcript]
    out = []
    for record in s.state.records:
        for ref in record.references:
            if "context.jsonl#" in ref:
                first, _, last = ref.split("#", 1)[1].partition("..")
                named = ids[ids.index(first) : ids.index(last or first) + 1]
                read = [json.loads(line)["id"] for line in (await cm.workspace.read(ref)).splitlines()]
                out.append({"reference": ref, "named": named, "read": read})
    return out


if __name__ == "__main__":
    mode, raw = sys.argv[1], sys.argv[2]
    result = asyncio.run({"append": append, "session": session}[mode](json.loads(raw)))
    print(json.dumps(result))
