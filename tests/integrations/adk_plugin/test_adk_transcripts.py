"""What the ADK plugin keeps as the transcript: per agent, forks, instructions left out, masked images."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from contextkeep._tokens import PromptCounter
from contextkeep.integrations.adk import ContextKeepPlugin, to_messages
from support.adk_harness import (
    APP,
    BUDGET,
    USER,
    Agent,
    Contents,
    Managers,
    ScriptedModel,
    assert_follows,
    bare,
    chunk,
    read_chunk,
)


async def test_each_agent_of_a_team_has_its_own_transcript(
    managers: Managers, billing: PromptCounter
) -> None:
    class Delegating(BaseLlm):
        """Hands the task to the reader."""

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            call = types.FunctionCall(name="transfer_to_agent", args={"agent_name": "reader"})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))

    cm = managers()
    model = ScriptedModel(billing=billing, calls=3)
    reader = LlmAgent(name="reader", model=model, tools=[read_chunk])
    lead = LlmAgent(name="lead", model=Delegating(model="delegating"), sub_agents=[reader])
    sessions = InMemorySessionService()
    runner = Runner(
        app=App(name=APP, root_agent=lead, plugins=[ContextKeepPlugin(cm)]), session_service=sessions
    )
    await sessions.create_session(app_name=APP, user_id=USER, session_id="team")
    for text in ["Read three chunks.", "And three more."]:  # the second turn goes to the reader directly
        model.begin()
        message = types.Content(role="user", parts=[types.Part(text=text)])
        _ = [e async for e in runner.run_async(user_id=USER, session_id="team", new_message=message)]

    async with cm.session("team") as lead_s, cm.session("team/reader") as reader_s:
        assert [m.tool_calls[0].name for m in lead_s.transcript if m.tool_calls] == ["transfer_to_agent"]
        assert sum(m.role == "tool" and m.name == "read_chunk" for m in reader_s.transcript) == 6
        assert reader_s.transcript[-1].text == "Read 6 chunks; the build is clean."


async def test_a_failed_tool_call_continues_in_a_fork(managers: Managers, billing: PromptCounter) -> None:
    """ADK drops a call left without a result from later requests: the history no longer continues."""
    failures = iter([False, True])

    def read_chunk(index: int) -> str:
        """Read one chunk of the build log (the second read fails).

        Args:
          index: Which chunk (1-based).
        """
        if next(failures, False):
            raise OSError("the disk is gone")
        return chunk(index)

    model = ScriptedModel(billing=billing, calls=3)
    built, plugin = Contents("built"), ContextKeepPlugin(managers())
    agent = LlmAgent(name="reader", model=model, tools=[read_chunk])
    runner = Runner(
        app=App(name=APP, root_agent=agent, plugins=[built, plugin]), session_service=InMemorySessionService()
    )
    await runner.session_service.create_session(app_name=APP, user_id=USER, session_id="flaky")
    for text in ["Read three chunks.", "Try again."]:
        model.begin()
        message = types.Content(role="user", parts=[types.Part(text=text)])
        try:
            _ = [e async for e in runner.run_async(user_id=USER, session_id="flaky", new_message=message)]
        except OSError:
            assert text == "Read three chunks."

    s = await plugin.session("flaky")
    assert s.conversation_id.startswith("flaky~fork-") and all(o.orphans == 0 for o in model.seen)
    assert [bare(m) for m in s.transcript] == [bare(m) for m in to_messages(built.requests[-1])] + [
        bare(s.transcript[-1])
    ]
    assert s.transcript[-1].text == "Read 5 chunks; the build is clean."


async def test_a_dynamic_instruction_stays_out_of_the_transcript(
    managers: Managers, billing: PromptCounter
) -> None:
    """Beside a `static_instruction`, ADK sends the instruction as a user content at the current turn."""
    model = ScriptedModel(billing=billing, calls=30)
    reader = LlmAgent(
        name="reader",
        model=model,
        tools=[read_chunk],
        static_instruction="You read build logs.",
        instruction="Today is {day}.",
    )
    sessions, plugin = InMemorySessionService(), ContextKeepPlugin(managers())
    runner = Runner(app=App(name=APP, root_agent=reader, plugins=[plugin]), session_service=sessions)
    agent = Agent(model, runner, sessions)
    await sessions.create_session(app_name=APP, user_id=USER, session_id="dynamic", state={"day": "Monday"})

    await agent.ask("dynamic", "Read 30 chunks.")

    s = await plugin.session("dynamic")
    assert s.conversation_id == "dynamic"  # the history continued the transcript at every call: no fork
    await assert_follows(s, agent, "dynamic")
    last = [json.loads(seen.contents)[-1]["parts"][0].get("text", "") for seen in model.seen[1:]]
    assert all("Today is Monday." in text for text in last)  # where ADK put it: after the latest results
    assert (
        len(model.seen) == 31
        and all(o.orphans == 0 for o in model.seen)
        and max(o.billed for o in model.seen) <= BUDGET
    )


async def test_an_image_the_view_masks_is_sent_as_its_reference(
    managers: Managers, billing: PromptCounter
) -> None:
    picture = types.Part(inline_data=types.Blob(data=b"\x89PNG\r\n\x1a\n" + bytes(64), mime_type="image/png"))
    built, sent = Contents("built"), Contents("sent")
    agent = Agent.build(ScriptedModel(billing=billing, calls=20), built, ContextKeepPlugin(managers()), sent)
    await agent.start("image")
    task = types.Content(
        role="user", parts=[types.Part(text="Read 20 chunks; the screenshot shows the error."), picture]
    )
    agent.model.begin()
    _ = [e async for e in agent.runner.run_async(user_id=USER, session_id="image", new_message=task)]

    first, last = sent.requests[0][0], sent.requests[-1][0]
    assert (
        first is built.requests[0][0] and first.parts is not None and first.parts[1].inline_data is not None
    )
    assert last is not built.requests[-1][0] and last.parts is not None  # the pinned task, image masked
    assert all(p.inline_data is None for p in last.parts) and "screenshot" in (last.parts[0].text or "")
