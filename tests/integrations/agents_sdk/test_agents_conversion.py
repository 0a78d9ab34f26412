"""What the SDK sends, as contextkeep counts and converts it: instructions, output schemas, every item kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import Agent, AgentOutputSchema, Runner
from agents.testing import ScriptedModel, assistant_message
from pydantic import BaseModel

from contextkeep._messages import Message
from contextkeep.integrations._openai_agents_items import ItemHistory, to_items
from contextkeep.integrations.openai_agents import ContextKeepModel
from support.openai_agents_harness import INSTRUCTIONS, TASK


class Answer(BaseModel):
    """A structured final answer."""

    file: str
    reason: str


async def test_instructions_and_output_schema_count_in_the_budget(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    scripted = ScriptedModel([[assistant_message('{"file": "src/m7.py", "reason": "round()"}')]])
    model = ContextKeepModel(scripted, manager(tmp_path / "agent.db"), conversation_id="ticket-6")
    structured = Agent(name="coder", instructions=INSTRUCTIONS, model=model, output_type=Answer)
    result = await Runner.run(structured, TASK)
    assert result.final_output == Answer(file="src/m7.py", reason="round()")
    schema = json.dumps(AgentOutputSchema(Answer).json_schema(), ensure_ascii=False, sort_keys=True)
    outside = counter.count_message(Message("system", f"{INSTRUCTIONS}\n\n{schema}"))
    assert model.session.budget().outside == outside > counter.count_message(Message("system", INSTRUCTIONS))


VARIED: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "See"},
            {"type": "input_image", "image_url": "https://x/a.png", "detail": "low"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look."}],
        "encrypted_content": "e1",
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "round"},
    },
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Reading.", "annotations": []}],
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "read_file",
        "arguments": '{"path": "a"}',
    },
    {
        "type": "computer_call",
        "id": "cc_1",
        "call_id": "c2",
        "action": {"type": "screenshot"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "a = 1"}]},
    {
        "type": "computer_call_output",
        "call_id": "c2",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
    },
    {"type": "mcp_approval_response", "approval_request_id": "ap_1", "approve": True},
    {"role": "user", "content": "Go on."},
]


def test_every_item_converts_back_to_itself() -> None:
    """Without the run's own items at hand (a restarted process), each message gives its items back."""
    converted = ItemHistory().convert(VARIED)
    assert [m.role for m, _ in converted] == ["system", "user", "assistant", "tool", "tool", "user", "user"]
    assert [item for m, _ in converted for item in to_items(m)] == VARIED
    reply = converted[2][0]
    assert [c.id for c in reply.tool_calls] == ["c1", "c2"]
    assert reply.reasoning == "Look." and "Reading." in reply.text and "web_search_call" in reply.text
