"""Layer 2's working-set digest, and layer 1 masking only where it pays."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from contextkeep._agent.recall import recall_tool
from contextkeep._agent.tools import ToolError
from contextkeep._compaction._digest import build_digest
from contextkeep._formats.openai import from_openai
from contextkeep._messages import Message, ToolCall
from contextkeep._tokens import HeuristicEncoder, OpenAIFraming, PromptCounter
from support import assert_references_readable, call, manager, result

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Fix the failing test in src/app.py"}
FILLER = "\n".join(f"noise line {j} with nothing the agent ever named" for j in range(12))


def _history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [SYSTEM, TASK]
    for i in range(n):
        if i == 2:  # the agent writes a script: its body is code, not a command line
            command = f"cat <<'EOF' > fix_{i}.py\nimport app\napp.compute_total_price([]) == 0\nEOF"
        else:
            command = f"grep -n compute_total_price src/app.py  # {i}"
        body = f"{FILLER}\n120: def compute_total_price(items):  # seen at {i}\n{FILLER}"
        out += [call(f"c{i}", command), result(f"c{i}", body)]
    out.append({"role": "assistant", "content": "compute_total_price in src/app.py is the culprit."})
    return out


async def test_dropped_rounds_leave_their_commands_with_references_and_the_lines_the_agent_used(
    tmp_path: Path,
) -> None:
    cm = manager(tmp_path, 4000, min_keep_recent_rounds=3, min_keep_tokens=500, drop_digest_tokens=1200)
    async with cm.session("c") as s:
        await s.add(_history(16))
        view = await s.prepare()
        (marker,) = [m for m in view.neutral if m.metadata.get("ck_kind") == "dropped"]
        text = marker.text
        assert "L2" in view.compacted and "Working set of the removed rounds" in text
        # One line per command, its own output's reference beside it, the newest first to stay.
        shown = re.findall(r"- grep -n compute_total_price src/app.py  # (\d+) → (\[.*\])", text)
        assert shown and all(
            ref == f"[Full detail available at: sessions/c/tool_result-c{i}.txt]" for i, ref in shown
        )
        assert "earlier command(s) left out" in text
        # The lines naming what the agent used come verbatim; the noise does not.
        assert "120: def compute_total_price(items):  # seen at" in text
        assert "app.compute_total_price([]) == 0" in text and "noise line" not in text
        assert await assert_references_readable(cm.workspace, [marker]) > 1
        counter = PromptCounter(HeuristicEncoder(), OpenAIFraming())
        digest = text.split("\n", 1)[1]
        # At most a tenth of the 4,000-token budget: in a small window a bigger one would soon refill it.
        assert counter.count_text(digest) <= 400 + 20
        # Nothing dropped since: the digest (so the prefix) is the same at the next call.
        await s.add([{"role": "user", "content": "go on"}])
        again = await s.prepare()
        assert [m.text for m in again.neutral if m.metadata.get("ck_kind") == "dropped"] == [text]


def _digest(history: list[dict[str, Any]], budget: int = 2000, refs: dict[str, str] | None = None) -> str:
    """The digest of every message after the task, with the given offload references on tool outputs."""
    transcript = [
        m.with_metadata(ck_ref=(refs or {})[m.tool_call_id]) if m.tool_call_id in (refs or {}) else m
        for m in from_openai(history)
    ]
    counter = PromptCounter(HeuristicEncoder(), OpenAIFraming())
    return build_digest(transcript, 2, len(transcript) - 1, counter, budget).text


def test_a_command_shows_what_ran_after_its_heredoc_but_not_the_body() -> None:
    script = "cat > fix.py << 'EOF'\nimport app\napp.compute_total_price([]) == 0\nEOF\npython fix.py"
    history = [
        SYSTEM,
        TASK,
        call("c0", script),
        result("c0", "ok"),
        call("c1", "cat <<'EOF' > t.py\nx = 1\nEOF"),
    ]
    history += [result("c1", ""), {"role": "assistant", "content": "compute_total_price works"}]
    lines = _digest(history).splitlines()
    assert "- cat > fix.py << 'EOF' … EOF python fix.py" in lines
    assert "- cat <<'EOF' > t.py" in lines  # nothing ran after the body: nothing to add
    assert "app.compute_total_price([]) == 0" in lines  # the body is the agent's code: a line of its own


def test_a_command_run_again_shows_once_with_its_newest_output() -> None:
    history = [SYSTEM, TASK]
    for i, outcome in enumerate(("1 failed: test_total_price", "all passed", "1 failed: test_total_price")):
        history += [call(f"c{i}", "pytest -q tests/test_app.py"), result(f"c{i}", outcome)]
    history.append({"role": "assistant", "content": "test_total_price fails again"})
    refs = {f"c{i}": f"out-{i}.txt" for i in range(3)}
    commands = [line for line in _digest(history, refs=refs).splitlines() if line.startswith("- pytest")]
    assert commands == ["- pytest -q tests/test_app.py → [Full detail available at: out-2.txt]"]


def test_a_line_that_is_little_more_than_a_name_comes_with_the_line_above_it() -> None:
    code = "def save(content):\n    with open('src/app.py', 'w') as f:\n        f.write(content)\n    return True"
    history = [SYSTEM, TASK, call("c0", "cat src/store.py"), result("c0", f"{FILLER}\n{code}\n{FILLER}")]
    history.append({"role": "assistant", "content": "f.write(content) must flush first"})
    text = _digest(history)
    assert "with open('src/app.py', 'w') as f:\nf.write(content)" in text


def test_what_the_agent_noted_in_its_own_words_is_kept_in_pieces_cut_after_its_sentences() -> None:
    # The agent's findings are in its prose, not in its commands: a long paragraph is cut after its
    # sentences and clauses, and the pieces naming what the agent goes on to use are kept verbatim.
    note = (
        "Interesting: the failure is not in the parser. "
        "Look at line 214 of src/schema.py, where `columns = [col.target.column for col in cols]` "
        "builds the list that `_remake_table` later joins into the index SQL. "
        + "That alone does not explain the ordering issue we saw in the earlier output. "
        * 3
    )
    history = [SYSTEM, TASK, {"role": "assistant", "content": note}]
    history += [call("c0", "cat src/schema.py"), result("c0", FILLER)]
    history.append({"role": "assistant", "content": "So _remake_table and col.target.column it is."})
    lines = _digest(history).splitlines()
    assert len(note) > 240  # too long to be one candidate line
    kept = [line for line in lines if line in note]
    assert any("Look at line 214 of src/schema.py," in line for line in kept)
    assert any("`columns = [col.target.column for col in cols]` builds" in line for line in kept)


def test_calls_to_several_tools_name_the_tool() -> None:
    def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        function = {"name": name, "arguments": json.dumps(arguments)}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    history = [
        SYSTEM,
        TASK,
        tool_call("c0", "get_reservation", {"reservation_id": "ZX9Q7"}),
        result("c0", "{}"),
    ]
    history += [tool_call("c1", "cancel_reservation", {"reservation_id": "ZX9Q7"}), result("c1", "done")]
    history.append({"role": "assistant", "content": "ZX9Q7 is cancelled"})
    lines = _digest(history).splitlines()
    assert "- get_reservation ZX9Q7" in lines and "- cancel_reservation ZX9Q7" in lines


def test_an_output_of_one_long_json_line_is_kept_in_pieces() -> None:
    flights = [
        {"flight_number": f"HAT{n:03d}", "origin": "JFK", "destination": "SEA", "price": 100 + n}
        for n in range(12)
    ]
    output = json.dumps({"reservation_id": "ZX9Q7", "user_id": "mia_li_3668", "flights": flights})
    history = [SYSTEM, TASK, call("c0", "get_reservation ZX9Q7"), result("c0", output)]
    history.append({"role": "assistant", "content": "Booked for mia_li_3668 on HAT007"})
    lines = _digest(history).splitlines()
    assert len(output) > 1000 and output not in lines
    assert any('"user_id": "mia_li_3668",' in line and line in output for line in lines)
    assert any('"flight_number": "HAT007",' in line and line in output for line in lines)


def test_a_digest_without_budget_is_empty_and_one_that_runs_out_says_so() -> None:
    transcript = from_openai(_history(20)[1:])
    counter = PromptCounter(HeuristicEncoder(), OpenAIFraming())
    assert build_digest(transcript, 1, 30, counter, 0).text == ""
    small = build_digest(transcript, 1, 30, counter, 60)
    assert small.full and "earlier command(s) left out" in small.text


async def test_masking_skips_outputs_it_would_barely_shorten(tmp_path: Path) -> None:
    small = "y" * 260  # a preview of 60 characters plus its reference saves a few tokens only
    large = "z" * 4000
    history = [SYSTEM, TASK, call("c0"), result("c0", small), call("c1"), result("c1", large)]
    history += [m for i in range(2, 9) for m in (call(f"c{i}"), result(f"c{i}", "w" * 900))]

    runs = itertools.count()

    async def masked(**config: Any) -> list[str]:
        cm = manager(
            tmp_path / str(next(runs)),
            1800,
            layers=("L1",),
            max_observation_age_rounds=5,
            tool_result_limit_max_ratio=None,
            **{"truncated_observation_max_chars": 60, **config},
        )
        async with cm.session("c") as s:
            await s.add(history)
            view = await s.prepare()
        return [m.tool_call_id or "" for m in view.neutral if m.role == "tool" and "Full detail" in m.text]

    assert await masked(mask_min_saving_tokens=150) == ["c1", "c2", "c3"]
    assert await masked() == ["c1", "c2", "c3"]  # the default is the same threshold
    assert await masked(mask_min_saving_tokens=0, truncated_observation_max_chars=20) == [
        "c0",
        "c1",
        "c2",
        "c3",
    ]
    # A 250-character preview plus its reference is longer than the 260-character output: kept whole.
    assert "c0" not in await masked(mask_min_saving_tokens=1, truncated_observation_max_chars=250)
    assert "c0" in await masked(mask_min_saving_tokens=0, truncated_observation_max_chars=250)


async def test_recall_reads_one_dropped_output_by_the_command_that_produced_it(tmp_path: Path) -> None:
    cm = manager(tmp_path, 4000, min_keep_recent_rounds=3, min_keep_tokens=500, drop_digest_tokens=1200)
    history = [SYSTEM, TASK, call("s0", "echo short"), result("s0", "ok: short output"), *_history(16)[2:]]
    async with cm.session("c") as s:
        await s.add(history)
        view = await s.prepare()
    (marker,) = [m for m in view.neutral if m.metadata.get("ck_kind") == "dropped"]
    span = marker.text.split("[Full detail available at: ", 1)[1].split("]", 1)[0]
    recall = recall_tool(cm.workspace, "c")
    # Too short to be offloaded on its own, the output is still one recall away from its command.
    assert await recall.call(json.dumps({"reference": span, "command": "echo short"})) == "ok: short output"
    body = await recall.call(json.dumps({"reference": span, "command": "src/app.py  # 3"}))
    assert "# seen at 3" in body and "# seen at 4" not in body
    with pytest.raises(ToolError, match="no command containing"):
        await recall.call(json.dumps({"reference": span, "command": "rm -rf"}))


class _Arguments(str):
    """A call's arguments that count how often they are parsed (`json.loads` checks for a BOM first)."""

    parsed = 0

    def startswith(self, *args: Any) -> bool:
        _Arguments.parsed += 1
        return super().startswith(*args)


def _parsed_history(conversation: str, n: int) -> list[Message]:
    out = [Message("system", SYSTEM["content"]), Message("user", f"{TASK['content']} ({conversation})")]
    for i in range(n):
        command = f"grep -n compute_total_price src/app.py  # {conversation} {i}"
        arguments = _Arguments(json.dumps({"command": command}))
        out.append(Message("assistant", f"step {i}", (ToolCall(f"c{i}", "bash", arguments),)))
        body = f"{FILLER}\n120: def compute_total_price(items):  # {conversation} {i}\n{FILLER}"
        out.append(Message("tool", body, tool_call_id=f"c{i}"))
    return out


def test_a_later_pass_reads_only_the_rounds_new_to_it_and_gives_the_same_digest_as_ever() -> None:
    counter = PromptCounter(HeuristicEncoder(), OpenAIFraming())
    a, b = _parsed_history("a", 32), _parsed_history("b", 30)
    first = build_digest(a[:62], 2, 50, counter, 800)
    before = _Arguments.parsed
    later = build_digest(a, 2, 54, counter, 800)
    # Two calls newly dropped, two newly sent: each parsed for its command and for its code, the
    # 28 rounds read before not again (every pass parsed each call of the history a few times).
    assert _Arguments.parsed - before <= 2 * 4
    # What a pass keeps between passes follows the transcript it is given: another conversation,
    # a shorter or a longer one, the digest is the one that transcript has.
    build_digest(b, 2, 40, counter, 800)
    assert build_digest(a, 2, 54, counter, 800) == later
    assert build_digest(a[:62], 2, 50, counter, 800) == first
    assert build_digest(a, 2, 54, counter, 800) == later and later != first
