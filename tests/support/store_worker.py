"""One contextkeep instance in its own OS process, for the multi-instance and crash-safety tests.

Run as `python tests/support/store_worker.py SPEC_JSON`. The worker opens a `ContextManager`
on the spec's store URL and workspace, then adds tool rounds to one conversation
and prepares a view after each, as an agent loop would. Every batch the store
accepted is written to a journal *after* `add` returned, so the test knows what
must survive. Fault injection needs no hook in the product: the store, workspace
and summariser are wrapped here, and `Trip` SIGKILLs the process the n-th time a
named point is reached.

The test modules import the shared pieces (`build_manager`, `tag`, the servers).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from contextkeep._capabilities import ModelSpec
from contextkeep._compaction.state import CompactionState
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import LocalWorkspace
from contextkeep._rounds import split_rounds
from contextkeep._session import Session
from contextkeep._summarizers import SummaryRequest, SummaryResult
from contextkeep.stores import Document, RedisStore, SQLStore, Store, open_store

WORKER = Path(__file__).resolve()
SERVERS = {
    "postgresql": os.environ.get(
        "CONTEXTKEEP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    ),
    "redis": os.environ.get("CONTEXTKEEP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
}
_PORTS = {"postgresql": 5432, "redis": 6379}
SYSTEM = {"role": "system", "content": "You are a careful agent working in a shared repository."}
TASK = {"role": "user", "content": "Run the commands one by one and keep notes."}


@functools.cache
def unreachable(name: str) -> str | None:
    """Why the server cannot be reached, or None (probed once per run)."""
    parts = urlsplit(SERVERS[name])
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or _PORTS[name]), 1).close()
    except OSError as exc:
        return str(exc)
    return None


def store_url(backend: str, prefix: str, tmp: Path) -> str:
    """A store URL with its own tables / keys under `prefix`."""
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'store.db'}?table_prefix={prefix}_"
    if backend == "redis":
        return f"{SERVERS['redis']}?key_prefix={prefix}:"
    return f"{SERVERS['postgresql']}?table_prefix={prefix}_"


def launch(spec: Mapping[str, Any], stderr: Path) -> subprocess.Popen[bytes]:
    """Start a worker process (its stderr goes to a file: a full pipe would block it)."""
    with stderr.open("wb") as err:
        return subprocess.Popen([sys.executable, str(WORKER), json.dumps(spec)], stderr=err)


def finish(proc: subprocess.Popen[bytes], stderr: Path, timeout: float = 120) -> int:
    """Wait for a worker; its return code (negative: killed by that signal)."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"worker timed out:\n{stderr.read_text()[-3000:]}") from None


def journal(path: Path) -> list[str]:
    """Every tag a worker's store accepted, in the order `add` returned them."""
    if not path.exists():
        return []
    return [t for line in path.read_text().splitlines() for t in json.loads(line)]


async def assert_offloads_intact(
    cm: ContextManager, conversation: str, transcript: Sequence[Message], state: CompactionState
) -> None:
    """Each summarised span reads back whole from its record's reference; no message is offloaded twice."""
    for r in state.records:
        if r.layer == "L3":
            (ref,) = r.references
            read = [json.loads(line)["id"] for line in (await cm.workspace.read(ref)).splitlines()]
            span = [m.id for m in transcript[r.first : r.last]]
            assert read == span, f"{ref} reads back {read}, the summary covered {span}"
    assert isinstance(cm.workspace, LocalWorkspace)
    context = cm.workspace.root / "sessions" / conversation / "context.jsonl"
    ids = [json.loads(line)["id"] for line in context.read_text().splitlines()] if context.exists() else []
    assert len(ids) == len(set(ids)), [i for i in set(ids) if ids.count(i) > 1]


async def drop(url: str) -> None:
    """Remove a test's tables or keys."""
    store = open_store(url)
    try:
        if isinstance(store, RedisStore):
            await store.delete_keys()
        elif isinstance(store, SQLStore):
            await store.drop_tables()
    finally:
        await store.close()


# -- the instance under test ---------------------------------------------------------------


def build_config(lease_ttl_ms: int) -> ContextConfig:
    """A small window and low thresholds, so masking (L1) and summaries (L3) happen every few steps.

    Every process of a test must use the same config: the view is a function of it.
    """
    return ContextConfig(
        reserved_tokens=0,
        layers=("L1", "L3"),
        warning_threshold=0.6,
        error_threshold=0.62,
        target_ratio=0.3,
        min_keep_recent_rounds=2,
        min_keep_tokens=200,
        max_observation_age_rounds=3,
        lease_ttl_ms=lease_ttl_ms,
    )


def build_manager(
    spec: Mapping[str, Any],
    *,
    store: Store | None = None,
    trip: Trip | None = None,
) -> ContextManager:
    """The manager every process of a test builds (the test process too, for seeding and checking)."""
    trip = trip or Trip(None, 0)
    return ContextManager(
        ModelSpec("test-model", int(spec.get("window", 2000))),
        config=build_config(int(spec.get("lease_ttl_ms", 60_000))),
        store=store or ProbeStore(open_store(spec["store"]), trip),
        workspace=TrippingWorkspace(spec["workspace"], trip),
        summarizer=CountingSummarizer(Path(spec["summaries"]), trip),
        fallback_summarizer=None,
        tokenizer="heuristic",
    )


def tag(m: Message) -> str:
    """What identifies a message the workers add: `{worker}_{step}:call` or `...:result`."""
    if m.role == "tool" and m.tool_call_id:
        return f"{m.tool_call_id}:result"
    if m.role == "assistant" and m.tool_calls:
        return f"{m.tool_calls[0].id}:call"
    return f"{m.role}:{m.text[:20]}"


def step_messages(worker: str, step: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The assistant call and tool result of one step (sizes vary, so rounds differ in weight)."""
    cid = f"{worker}_{step}"
    call = {
        "role": "assistant",
        "content": f"{cid}: next command",
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cmd {step}"})},
            }
        ],
    }
    size = 250 + (step * 37) % 400
    result = {"role": "tool", "tool_call_id": cid, "content": f"{cid} HEAD " + "x" * size + f" TAIL {cid}"}
    return call, result


def append_line(path: Path, line: str) -> None:
    # One write() on O_APPEND: lines from concurrent processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class Trip:
    """SIGKILLs this process the `nth` time `point` is reached (never if `point` is None).

    The points are counted so that n names the same moment whatever the ids' lengths:
    `during_summary` and `after_offload` (only summaries offload here) count summaries,
    `before_save` counts saves of a new summary, `between_appends` counts rounds after the first summary.
    """

    def __init__(self, point: str | None, nth: int) -> None:
        self.point = point
        self.nth = nth
        self.count = 0
        self.summaries = 0

    def reach(self, point: str) -> None:
        if point != self.point:
            return
        self.count += 1
        if self.count == self.nth:
            os.kill(os.getpid(), signal.SIGKILL)


class CountingSummarizer:
    """A deterministic summariser that logs the span of every call (one JSON line per summary)."""

    def __init__(self, log: Path, trip: Trip) -> None:
        self.log = log
        self.trip = trip

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        ids = [m.id or "" for m in request.messages]
        append_line(self.log, json.dumps({"pid": os.getpid(), "first": ids[0], "last": ids[-1]}))
        self.trip.summaries += 1
        self.trip.reach("during_summary")
        count = int((request.previous.data or {}).get("count", 0)) + 1 if request.previous else 1
        # Small and bounded, so the summary never crowds the window however long the run.
        text = f"Earlier work ({count} summaries): commands ran up to message {ids[-1]}."
        return SummaryResult(text, {"count": count, "last": ids[-1]}, method="extractive")


class TrippingWorkspace(LocalWorkspace):
    """The local workspace, with a kill point right after a span was offloaded."""

    def __init__(self, root: str | os.PathLike[str], trip: Trip) -> None:
        super().__init__(root)
        self.trip = trip

    async def offload_context(self, session_id: str, messages: Sequence[Message]) -> str:
        ref = await super().offload_context(session_id, messages)
        self.trip.reach("after_offload")
        return ref


class ProbeStore:
    """A `Store` proxy that counts CAS conflicts and holds two kill points."""

    def __init__(self, inner: Store, trip: Trip) -> None:
        self.inner = inner
        self.trip = trip
        self.conflicts = {"append": 0, "save_document": 0}
        self.leases: list[bool] = []
        self._cursor = -1

    def __repr__(self) -> str:
        return repr(self.inner)  # the lease's owner slots tell stores apart by their repr

    async def append(
        self, conversation_id: str, messages: Sequence[Message], *, expected_length: int
    ) -> bool:
        if self.trip.summaries and any(m.role == "tool" for m in messages):
            self.trip.reach("between_appends")  # the call is stored, its result not yet
        ok = await self.inner.append(conversation_id, messages, expected_length=expected_length)
        self.conflicts["append"] += not ok
        return ok

    async def load_messages(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Message]:
        return await self.inner.load_messages(conversation_id, after=after, limit=limit)

    async def count_messages(self, conversation_id: str) -> int:
        return await self.inner.count_messages(conversation_id)

    async def load_document(self, conversation_id: str, kind: str, scope: str = "") -> Document:
        return await self.inner.load_document(conversation_id, kind, scope)

    async def save_document(
        self,
        conversation_id: str,
        kind: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        scope: str = "",
    ) -> bool:
        cursor = (data.get("summary") or {}).get("cursor", -1) if kind == "compaction" else -1
        if cursor > self._cursor:
            self._cursor = cursor
            self.trip.reach("before_save")  # a new summary is about to be saved
        ok = await self.inner.save_document(
            conversation_id, kind, data, expected_version=expected_version, scope=scope
        )
        self.conflicts["save_document"] += not ok
        return ok

    async def list_scopes(self, conversation_id: str, kind: str) -> list[str]:
        return await self.inner.list_scopes(conversation_id, kind)

    async def acquire_lease(self, conversation_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        ok = await self.inner.acquire_lease(conversation_id, name, owner, ttl_ms)
        self.leases.append(ok)
        return ok

    async def release_lease(self, conversation_id: str, name: str, owner: str) -> None:
        await self.inner.release_lease(conversation_id, name, owner)

    async def list_conversations(self) -> list[str]:
        return await self.inner.list_conversations()

    async def close(self) -> None:
        await self.inner.close()


# -- the worker loop -----------------------------------------------------------------------


async def _accepted(log: Path, stored: Sequence[Message]) -> None:
    append_line(log, json.dumps([tag(m) for m in stored]))


async def _barrier(spec: Mapping[str, Any]) -> None:
    """Start together with the peers, so their steps really interleave."""
    folder = Path(spec["journal"]).parent
    (folder / f"{spec['worker']}.ready").touch()
    deadline = time.monotonic() + 30
    while not all((folder / f"{peer}.ready").exists() for peer in spec.get("peers", ())):
        if time.monotonic() > deadline:
            raise TimeoutError("the peer workers never started")
        await asyncio.sleep(0.01)


async def _finish_pending(s: Session, log: Path) -> None:
    """After a crash between a call and its result, run the tool again (as an agent would)."""
    last = s.transcript[-1] if s.transcript else None
    if last is not None and last.role == "assistant" and last.tool_calls:
        worker, step = last.tool_calls[0].id.rsplit("_", 1)
        await _accepted(log, await s.add([step_messages(worker, int(step))[1]]))


def _next_step(s: Session, worker: str) -> int:
    """Where this worker resumes: after its last step with a stored result."""
    ids = [m.tool_call_id or "" for m in s.transcript if m.role == "tool"]
    return max((int(i.rsplit("_", 1)[1]) for i in ids if i.startswith(f"{worker}_")), default=-1) + 1


async def run(spec: Mapping[str, Any]) -> dict[str, Any]:
    trip = Trip(spec.get("kill"), int(spec.get("nth", 0)))
    store = ProbeStore(open_store(spec["store"]), trip)
    cm = build_manager(spec, store=store, trip=trip)
    log = Path(spec["journal"])
    worker = str(spec["worker"])
    started = time.monotonic()
    views = 0
    try:
        async with cm.session(spec["conversation"]) as s:
            if spec.get("view_out"):  # a fresh process: prepare once and hand back the exact bytes
                view = await s.prepare()
                split_rounds(view.neutral)
                Path(spec["view_out"]).write_text(json.dumps(view.messages, ensure_ascii=False))
                return {"views": 1}
            await _barrier(spec)
            await _finish_pending(s, log)
            for step in range(_next_step(s, worker), int(spec["steps"])):
                call, result = step_messages(worker, step)
                if spec.get("split"):  # two appends per round: the call, then (after the tool ran) its result
                    await _accepted(log, await s.add([call]))
                    await _accepted(log, await s.add([result]))
                else:  # one atomic append per round: several writers cannot interleave a call and result
                    await _accepted(log, await s.add([call, result]))
                view = await s.prepare()
                split_rounds(view.neutral)  # pairing intact in every view
                views += 1
    finally:
        await cm.close()
    return {"views": views, "conflicts": store.conflicts, "elapsed": time.monotonic() - started}


def main() -> None:
    spec = json.loads(sys.argv[1])
    report = asyncio.run(run(spec))
    if spec.get("report"):
        Path(spec["report"]).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
