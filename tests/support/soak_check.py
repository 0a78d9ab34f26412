"""The checker of the offload race and soak tests: what several instances left behind, read cold.

It reads the transcript straight from the store and the workspace's files through a plain
`LocalWorkspace` (no session: loading one would write missing copies and hide a loss), then
checks that every reference in every final view, and every reference the transcript holds,
returns the content of the messages it names; that every acknowledged message is stored exactly
once; and that the instances' final views are byte-identical.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contextkeep._compaction.builder import REF_KEY
from contextkeep._errors import WorkspaceError
from contextkeep._formats.openai import from_openai
from contextkeep._messages import Message, message_from_dict
from contextkeep._offload import LocalWorkspace
from contextkeep.stores import open_store
from support.builders import references
from support.race_worker import tag


@dataclass
class Findings:
    """What the checker found (`problems` empty: nothing wrong)."""

    messages: int = 0
    acknowledged: int = 0
    view_references: int = 0
    """References shown in the final views (each view counted)."""
    transcript_references: int = 0
    """Offload references the stored messages hold."""
    problems: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, int]:
        return {
            "messages": self.messages,
            "acknowledged": self.acknowledged,
            "view_references": self.view_references,
            "transcript_references": self.transcript_references,
            "problems": len(self.problems),
        }


async def load_transcript(store_url: str, conversation: str) -> list[Message]:
    store = open_store(store_url)
    try:
        return await store.load_messages(conversation)
    finally:
        await store.close()


async def check(
    transcript: Sequence[Message],
    workspace_root: Path,
    views: Mapping[str, bytes],
    journals: Mapping[str, list[str]],
) -> Findings:
    """Every check on one conversation; `journals` holds each worker's acknowledged tags in order."""
    found = Findings(messages=len(transcript))
    workspace = LocalWorkspace(workspace_root)
    owners: defaultdict[str, list[Message]] = defaultdict(list)
    for m in transcript:
        if isinstance(ref := m.metadata.get(REF_KEY), str):
            owners[ref].append(m)
    found.transcript_references = len(owners)
    for ref in owners:
        found.problems += await _verify(workspace, ref, owners, transcript)
    for name, view in views.items():
        shown = references(from_openai(json.loads(view)))
        found.view_references += len(shown)
        found.problems += [
            f"{name}'s view: {p}" for ref in shown for p in await _verify(workspace, ref, owners, transcript)
        ]
    if len(set(views.values())) > 1:
        found.problems.append(f"the final views differ: {sorted(views)}")
    tags = Counter(tag(m) for m in transcript)
    found.problems += [f"{t} stored {n} times" for t, n in tags.items() if n > 1]
    for worker, acked in journals.items():
        found.acknowledged += len(acked)
        found.problems += [f"{worker} acknowledged {t}, not stored" for t in acked if t not in tags]
        # In its order; a round stored but killed before its journal line is not acknowledged.
        stored = iter(t for t in tags if t.startswith(f"{worker}:"))
        if not all(t in stored for t in acked):
            found.problems.append(f"{worker}'s acknowledged messages are not stored in its order")
    return found


async def _verify(
    workspace: LocalWorkspace, ref: str, owners: Mapping[str, list[Message]], transcript: Sequence[Message]
) -> list[str]:
    """What is wrong with one reference (nothing: it reads back the messages it names)."""
    try:
        text = await workspace.read(ref)
    except WorkspaceError as exc:
        return [f"{ref}: {exc}"]
    if "#" in ref:  # a span of context.jsonl
        first, _, last = ref.split("#", 1)[1].partition("..")
        ids = [m.id for m in transcript]
        span = transcript[ids.index(first) : ids.index(last or first) + 1]
        read = [message_from_dict(json.loads(line)) for line in text.splitlines()]
        got = [(m.id, m.role, m.text) for m in read]
        want = [(m.id, m.role, m.text) for m in span]
        return (
            [] if got == want else [f"{ref} reads back {[g[0] for g in got]}, names {[w[0] for w in want]}"]
        )
    named = owners.get(ref, [])
    if not named:
        return [f"{ref} names no stored message"]
    return [f"{ref} holds {text[:24]!r}, names {m.id} ({m.text[:24]!r})" for m in named if m.text != text]
