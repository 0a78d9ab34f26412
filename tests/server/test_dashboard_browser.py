"""The dashboard in headless Chromium, live, while an agent works on the same store.

The workload runs in-process (a `ContextManager` + `FakeLLMServer` loop in a thread);
switching to the real `contextkeep demo` is the one line ``WORKLOAD = demo_subprocess``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._cli.serve import demo_settings
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep._usage import Usage
from contextkeep.models.openai import OpenAIAdapter
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec

# Chromium drives the dashboard while a workload paces through its states.
pytestmark = [pytest.mark.slow, pytest.mark.services]

MODEL, WINDOW, RESERVED = "fake-model", 2_000, 200
CONFIG = ContextConfig(min_keep_tokens=0, reserved_tokens=RESERVED)
TOKENIZER = "tiktoken:o200k_base"  # what the fake model counts with
POLL = 0.1  # how often the server reads the store the demo writes to
PACE = 3 * POLL  # seconds between steps, so each indicator state lasts several polls
TOOLS = [
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}
]


class Workload:
    """A running agent: `stop()` asks it to finish, `wait()` joins it."""

    def __init__(self, stop, wait) -> None:
        self.stop, self.wait = stop, wait


def in_process(store: str, workspace: Path) -> Workload:
    """A paced tool-using agent on the fake model, in a thread."""
    stopping = threading.Event()
    failure: list[BaseException] = []

    async def agent() -> None:
        reply = Reply(text="looking", tool_calls=[ToolCallSpec("bash", {"command": "tail log"})])
        with FakeLLMServer(context_window=WINDOW, responder=lambda _: reply) as llm:
            m = ContextManager(
                ModelSpec(MODEL, WINDOW), config=CONFIG, store=store, workspace=workspace, tokenizer=TOKENIZER
            )
            adapter = OpenAIAdapter(MODEL, base_url=llm.base_url, api_key="test", context_window=WINDOW)
            async with m.session("demo") as s:
                await s.add(
                    [{"role": "system", "content": "You watch logs."}, {"role": "user", "content": "go"}]
                )
                for step in range(60):
                    if stopping.is_set():
                        break
                    view = await s.prepare(tools=TOOLS)
                    await asyncio.sleep(PACE)  # the model "thinks" (the view may be compacted already)
                    answer = await adapter.complete(view.neutral, tools=TOOLS)
                    await s.record(answer)
                    await asyncio.sleep(PACE)
                    lines = "\n".join(
                        f"{step}.{i} worker {i} handled request {step * 10 + i}" for i in range(12)
                    )
                    await s.add(
                        [
                            {"role": "tool", "tool_call_id": c.id, "content": lines}
                            for c in answer.message.tool_calls
                        ]
                    )
                    await asyncio.sleep(PACE)
            await m.close()

    def run() -> None:
        try:
            asyncio.run(agent())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def wait() -> None:
        thread.join(30)
        if failure:
            raise failure[0]

    return Workload(stopping.set, wait)


def demo_subprocess(store: str, workspace: Path) -> Workload:
    """`contextkeep demo` in its own process against the same store, paced so each state lasts."""
    exe = Path(sys.executable).with_name("contextkeep")
    env = {**os.environ, "CONTEXTKEEP_HOME": str(workspace.parent / "home")}
    command = [str(exe), "demo", "--store", store, "--workspace", str(workspace), "--delay", str(PACE)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    return Workload(proc.terminate, lambda: proc.wait(60))


WORKLOAD = demo_subprocess

RECORD_PHASES = """() => {
  window.__phases = [];
  const card = document.getElementById("indicator");
  const snap = () => {
    const s = `${card.dataset.state}|${card.dataset.usage}`;
    if (window.__phases[window.__phases.length - 1] !== s) window.__phases.push(s);
  };
  new MutationObserver(snap).observe(card, { attributes: true });
  snap();
}"""


def passed_through(phases: list[str]) -> bool:
    """normal (confirmed) → warning → compacted, waiting for confirmation → confirmed again."""
    wanted = [
        lambda st, us: st == "normal" and us == "confirmed",
        lambda st, us: st == "warning",
        lambda st, us: us == "invalidated",
        lambda st, us: us == "confirmed",
    ]
    for phase in phases:
        if wanted and wanted[0](*phase.split("|")):
            wanted.pop(0)
    return not wanted


def test_indicator_follows_a_live_workload(browser, tmp_path):
    store, workspace = f"sqlite:///{tmp_path / 'ck.db'}", tmp_path / "ws"
    # The dashboard is pointed at the demo exactly as `contextkeep serve --demo` points it.
    settings = demo_settings(ServerSettings(store=store, workspace=str(workspace), poll_interval=POLL))
    artifacts = Path(os.environ.get("CONTEXTKEEP_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    with BackgroundServer(create_app(settings)) as server:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(server.url)
        page.evaluate(RECORD_PHASES)
        workload = WORKLOAD(store, workspace)
        try:
            deadline = time.monotonic() + 45
            while not passed_through(phases := page.evaluate("window.__phases")):
                assert time.monotonic() < deadline, f"indicator phases seen: {phases}"
                time.sleep(0.2)
        finally:
            workload.stop()
            workload.wait()
        page.wait_for_selector("#timeline tbody tr")
        assert page.locator("#connection").get_attribute("data-live") == "true"
        assert "last confirmed" in page.locator("#confirmed-text").inner_text()
        marked = page.locator('#inspector li:not([data-kind="original"])')
        assert marked.count() >= 1
        page.locator("#inspector button.ref").first.click()
        page.wait_for_function("document.getElementById('reference-text').textContent.length > 20")
        page.keyboard.press("Escape")
        shot = artifacts / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"dashboard screenshot: {shot}")


async def _two_agents(store: str, workspace: Path) -> None:
    """One conversation in which two agents (the server's default scope and a reviewer) recorded calls."""
    m = ContextManager(ModelSpec(MODEL, WINDOW), store=store, workspace=workspace, tokenizer=TOKENIZER)
    for agent_id, text in (("default", "write it"), ("reviewer", "review it")):
        async with m.session("shared", agent_id=agent_id) as s:
            await s.add({"role": "user", "content": text})
            view = await s.prepare()
            await s.record({"role": "assistant", "content": "done"}, Usage(view.tokens, 5))
    await m.close()


def test_the_indicator_names_the_other_agents_of_a_conversation(browser, tmp_path):
    store, workspace = f"sqlite:///{tmp_path / 'ck.db'}", tmp_path / "ws"
    with ThreadPoolExecutor(1) as pool:  # playwright's sync API holds this thread's event loop
        pool.submit(asyncio.run, _two_agents(store, workspace)).result(60)
    settings = ServerSettings(store=store, workspace=str(workspace), model=MODEL, window=WINDOW)
    with BackgroundServer(create_app(settings)) as server:
        page = browser.new_page()
        page.goto(f"{server.url}#shared")
        page.wait_for_selector(f'#scopes li[data-scope="reviewer|0|{MODEL}"]')
        assert page.locator("#scopes li").count() == 1  # the server's own scope is the gauge above
        assert "tokens confirmed · CONFIRMED_BASELINE" in page.locator("#scopes").inner_text()
