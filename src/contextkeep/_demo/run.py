"""Running the demo: the agent, its tools, the built-in (or a real) model, and the closing report."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextkeep._agent import Agent, Runner
from contextkeep._config import ContextConfig
from contextkeep._demo.brain import AUDIT_TASK, FOLLOW_UP_TASK, respond
from contextkeep._demo.display import Display
from contextkeep._demo.project import create_project, project_tools
from contextkeep._events import Event
from contextkeep._formats import from_openai
from contextkeep._summarizers import LLMSummarizer
from contextkeep._tokens import counter_for_model
from contextkeep.models import OpenAIAdapter
from contextkeep.stores import default_store_url
from contextkeep.testing import FakeLLMServer

__all__ = ["DemoResult", "run_demo"]

DEMO_MODEL = "contextkeep-demo"
"""Model key of the built-in model."""
DEMO_AGENT = "demo-auditor"
"""Agent id of the demo (with the model, it scopes the usage baselines a dashboard shows)."""
DEMO_WINDOW = 6_144
"""The built-in model's context window: small, so that every layer fires in under a minute."""
DEMO_CONFIG = ContextConfig(
    reserved_tokens=512,  # the replies' max_tokens, explicit so a dashboard computes the same budget
    tool_result_limit=500,
    warning_threshold=0.60,
    error_threshold=0.90,
    critical_threshold=0.95,
    trigger_ratio=0.75,
    target_ratio=0.45,
    compression_threshold_ratio=0.66,
    max_observation_age_rounds=4,
    min_keep_recent_rounds=2,
    min_keep_tokens=600,
    truncated_observation_max_chars=160,
)
"""Demo settings: the indicator warns from 60 %; confirmed usage schedules compression at 66 %."""
SYSTEM_PROMPT = "You audit small services. Use the tools; keep exact file names, numbers and errors."


def demo_home() -> Path:
    """Where the demo keeps its store, workspace and project: `$CONTEXTKEEP_HOME` or `./.contextkeep`."""
    return Path(os.environ.get("CONTEXTKEEP_HOME", ".contextkeep")).resolve()


@dataclass
class DemoResult:
    """What a demo run did."""

    conversation_id: str
    """The conversation (resume it with `--resume`)."""
    store: str
    """The store URL."""
    workspace: Path
    """The offload workspace."""
    display: Display
    """Figures gathered from the events."""
    seconds: float
    """Wall time."""
    output: str
    """The agent's final answer."""


async def run_demo(
    *,
    home: Path,
    store: str | None = None,
    workspace: Path | None = None,
    resume: bool = False,
    model: str | None = None,
    base_url: str | None = None,
    window: int | None = None,
    delay: float = 0.0,
) -> DemoResult:
    """Run one turn of the demo agent (a follow-up turn with `resume`)."""
    home.mkdir(parents=True, exist_ok=True)
    store = store or default_store_url()
    workspace = workspace or home / "workspace"
    last = home / "demo-conversation"
    if resume and last.exists():
        conversation_id, task = last.read_text().strip(), FOLLOW_UP_TASK
    else:
        conversation_id, task = f"demo-{time.strftime('%Y%m%d-%H%M%S')}", AUDIT_TASK
    last.write_text(conversation_id)
    display = Display()
    project = create_project(home / "demo-project")
    started = time.perf_counter()
    server = None if model else _builtin_model()
    try:
        if server is not None:
            server.start()
            adapter = OpenAIAdapter(
                DEMO_MODEL,
                base_url=server.base_url,
                api_key="demo",
                context_window=DEMO_WINDOW,
                max_output_tokens=512,
            )
        else:
            adapter = await OpenAIAdapter.create(
                str(model), base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY"), context_window=window
            )
        display.settings(
            DEMO_CONFIG if server is not None else ContextConfig(), DEMO_WINDOW if server else window
        )
        agent = Agent(
            DEMO_AGENT,
            adapter,
            system_prompt=SYSTEM_PROMPT,
            tools=project_tools(project),
            config=DEMO_CONFIG if server is not None else None,
            default_max_tokens=512,
            max_iterations=80,
            summarizer=LLMSummarizer(adapter),
        )
        runner = Runner(store=store, workspace=str(workspace), listeners=[display])
        if server is not None:
            runner.events.subscribe(_overflow_once(server, display))
        if delay:
            runner.events.subscribe(_pause(delay), "context.status", "context.compression.completed")
        turn = await runner.run(agent, conversation_id, task)
        await runner.manager(agent).close()
        await adapter.client.close()  # its connections belong to this event loop
    finally:
        if server is not None:
            server.stop()
    return DemoResult(conversation_id, store, workspace, display, time.perf_counter() - started, turn.output)


def _builtin_model() -> FakeLLMServer:
    """The scripted agent model on loopback; it counts with the same offline estimate as the client."""
    counter = counter_for_model(DEMO_MODEL, "heuristic")

    def count(body: Mapping[str, Any]) -> int:
        return counter.count_prompt(from_openai(body.get("messages", [])), body.get("tools"))

    return FakeLLMServer(
        model=DEMO_MODEL,
        context_window=DEMO_WINDOW,
        responder=respond,
        counter=count,
        encoder=counter.encoder,
    )


def _overflow_once(server: FakeLLMServer, display: Display) -> Any:
    """Make the provider reject one call as too long, as a provider with hidden prompt overhead does."""
    armed = [True]

    def listener(event: Event) -> None:
        data = event.to_dict()
        if event.type != "context.status" or data["compact_layer"] is not None or not armed[0]:
            return
        if display.calls >= 12 and data["ratio"] is not None and data["ratio"] > 0.3:
            armed[0] = False
            print(
                "           [demo] the provider will reject the next call as too long (simulated)", flush=True
            )
            # Its real window, with a hidden overhead of a quarter of the view on its side.
            reply = DEMO_CONFIG.reserved_tokens
            prompt = DEMO_WINDOW - reply + data["used"] // 4
            message = (
                f"This model's maximum context length is {DEMO_WINDOW} tokens. However, you requested "
                f"{prompt + reply} tokens ({prompt} in the messages, {reply} in the completion). "
                "Please reduce the length of the messages or completion."
            )
            body = {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
            server.fail_next(400, body)

    return listener


def _pause(seconds: float) -> Any:
    """Hold each state for a while (before a call, and after a compaction) so a dashboard can show it."""

    def listener(event: Event) -> None:
        if event.to_dict().get("compact_layer") is None:
            time.sleep(seconds)

    return listener
