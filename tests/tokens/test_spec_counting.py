"""Counting never fails for lack of a tokenizer, and without one it learns from confirmed usage.

DB-GPT: "如果 tokenizer 无法统计，则退化为粗略估算" (a tokenizer that cannot count falls back to a rough
estimate). Design principle 3: provider-confirmed usage anchors the count; estimates cover only the
messages added since.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from contextkeep import ContextConfig, ContextManager, ModelSpec
from contextkeep._cli import main
from contextkeep._errors import TokenizerError
from contextkeep._messages import Message
from contextkeep._tokens import (
    CalibratedCounter,
    CountSource,
    DeepSeekFraming,
    HFEncoder,
    PieceEncoder,
    PromptCounter,
    counter_for_model,
)
from contextkeep._usage import Usage
from contextkeep.replay.accuracy import count_accuracy
from contextkeep.replay.trajectories import Trajectory, load_trajectories
from support import DEEPSEEK_TOKENIZER, call, mini_swe_agent_files, require_shared, result

RUNS: list[Path | None] = [*mini_swe_agent_files()] or [None]
CONVERSATION = [
    {"role": "system", "content": "You are a careful engineer."},
    {"role": "user", "content": "List the files, then read the README."},
    call("c1", "ls -la"),
    result("c1", "total 12\ndrwxr-xr-x 2 dev dev 4096 README.md\n-rw-r--r-- 1 dev dev 220 setup.py\n"),
]


def warnings_from(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "contextkeep.tokens"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TokenizeEndpoint:
    """A user's encoder that asks a serving endpoint's `/tokenize` (vLLM's) for every count."""

    exact = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"tokenize:{url}"

    def count(self, text: str) -> int:
        reply = httpx.post(self.url, json={"prompt": text}, timeout=2)
        return len(reply.json()["tokens"])


def test_an_unreadable_tiktoken_cache_falls_back_to_an_estimate_with_one_warning(tmp_path: Path) -> None:
    # A fresh process: tiktoken keeps every encoding it loaded, so only a new one finds the cache empty.
    script = textwrap.dedent(
        """
        import asyncio, json, logging
        import contextkeep as ck

        logging.basicConfig(format="%(name)s %(levelname)s %(message)s")

        async def main():
            cm = ck.ContextManager(ck.ModelSpec("gpt-4o", 128_000), workspace="ws")
            out = []
            for n in range(2):
                async with cm.session(f"c{n}") as s:
                    await s.add([{"role": "user", "content": "Count me, with or without tiktoken."}])
                    view = await s.prepare()
                    out.append([view.status.source.value, view.tokens])
            print(json.dumps(out))

        asyncio.run(main())
        """
    )
    empty = tmp_path / "tiktoken-cache"
    empty.mkdir()
    # No download either: the cache is empty and the proxy refuses every connection.
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(empty), "HTTPS_PROXY": f"http://127.0.0.1:{closed_port()}"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    counted = json.loads(done.stdout)
    assert [source for source, _ in counted] == ["estimate", "estimate"]
    assert all(0 < tokens < 50 for _, tokens in counted)  # a 35-character message
    warnings = [line for line in done.stderr.splitlines() if line.startswith("contextkeep.tokens WARNING")]
    assert len(warnings) == 1, done.stderr
    assert "tiktoken" in warnings[0] and "o200k_base" in warnings[0]


async def test_a_corrupt_tokenizer_json_is_replaced_by_the_calibrated_estimate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corrupt, other = tmp_path / "tokenizer.json", tmp_path / "other.json"
    corrupt.write_text('{"model": {"type": "BPE", "vocab": ')  # cut off mid-download
    other.write_text("not json at all")
    caplog.set_level(logging.WARNING, logger="contextkeep.tokens")
    cm = ContextManager(
        ModelSpec("deepseek-chat", 131_072), workspace=tmp_path / "ws", tokenizer=str(corrupt)
    )
    async with cm.session("a") as s:
        await s.add(CONVERSATION)
        first = await s.prepare()
        confirmed = first.tokens + 40  # the provider counts more (a hidden prompt of its own, say)
        await s.record(
            {"role": "assistant", "content": "Reading it now."},
            Usage(input_tokens=confirmed, output_tokens=5),
        )
        await s.add([{"role": "user", "content": "Thanks."}])
        second = await s.prepare()
    async with cm.session("b") as s:  # the same broken file: no second warning
        await s.add(CONVERSATION)
        await s.prepare()
    assert first.status.source is second.status.source is CountSource.ESTIMATE
    assert first.tokens > 0
    # Once the provider has counted a prompt, the count starts from its figure.
    assert confirmed < second.tokens < 2 * confirmed
    assert len(warnings_from(caplog)) == 1
    assert "tokenizer.json" in warnings_from(caplog)[0]
    async with ContextManager("deepseek-chat", workspace=tmp_path / "ws", tokenizer=str(other)).session(
        "c"
    ) as s:
        await s.add(CONVERSATION)
        await s.prepare()
    assert len(warnings_from(caplog)) == 2  # another cause, another warning


async def test_a_tokenizer_that_fails_to_count_falls_back_to_the_heuristic_per_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="contextkeep.tokens")
    down = TokenizeEndpoint(f"http://127.0.0.1:{closed_port()}/tokenize")
    cm = ContextManager(ModelSpec("qwen-max", 32_768), workspace=tmp_path / "ws", tokenizer=down)
    async with cm.session("a") as s:
        await s.add(CONVERSATION)
        view = await s.prepare()
        await s.record({"role": "assistant", "content": "Reading it now."})
        await s.add([{"role": "user", "content": "Thanks."}])
        again = await s.prepare()
    assert view.status.source is again.status.source is CountSource.ESTIMATE
    # DB-GPT's rough estimate, one token per 4 characters, is the floor of every text's count.
    assert view.tokens >= sum(len(m.text) // 4 for m in view.neutral)
    assert again.tokens > view.tokens
    assert len(warnings_from(caplog)) == 1


async def test_strict_counting_raises_instead_of_estimating(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "tokenizer.json"
    with pytest.raises(TokenizerError, match=r"cannot load tokenizer\.json"):
        counter_for_model("deepseek-chat", f"hf:{missing}", strict=True)
    strict = ContextManager(
        "deepseek-chat", workspace=tmp_path / "ws", tokenizer=str(missing), strict_tokenizer=True
    )
    with pytest.raises(TokenizerError, match="missing"):
        async with strict.session("a"):
            pass
    down = TokenizeEndpoint(f"http://127.0.0.1:{closed_port()}/tokenize")
    cm = ContextManager("qwen-max", workspace=tmp_path / "ws", tokenizer=down, strict_tokenizer=True)
    async with cm.session("b") as s:
        await s.add(CONVERSATION)
        with pytest.raises(httpx.ConnectError):
            await s.prepare()


def test_a_confirmed_prompt_anchors_only_the_prompts_that_extend_it() -> None:
    counter = CalibratedCounter(PieceEncoder(), DeepSeekFraming())
    prompt = [
        Message("system", "You are terse."),
        Message("user", "Explain the budget states in one line each."),
    ]
    raw = counter.count_prompt(prompt)
    counter.observe(prompt, None, 2 * raw)  # this provider counts twice what we do
    assert counter.count_prompt(prompt) == 2 * raw
    longer = [*prompt, Message("assistant", "normal, warning, error, critical, overflow")]
    assert counter.count_prompt(longer) == 2 * raw + round(2 * (uncalibrated(longer) - raw))
    # A view whose front was rewritten (compaction) is estimated whole, with the learned ratio.
    rewritten = [Message("system", "You are terse and exact."), *longer[1:]]
    assert counter.count_prompt(rewritten) == round(2 * uncalibrated(rewritten))


def uncalibrated(prompt: list[Message]) -> int:
    return PromptCounter(PieceEncoder(), DeepSeekFraming()).count_prompt(prompt)


async def replay_billed(trajectory: Trajectory, cm: ContextManager) -> list[float]:
    """add → prepare → record with the usage DeepSeek returned; |error| % of each prepared count."""
    errors = []
    async with cm.session("replay") as s:
        added = 0
        for recorded in trajectory.calls:
            await s.add(trajectory.messages[added : recorded.index])
            view = await s.prepare(tools=trajectory.tools)
            prompt = trajectory.messages[: recorded.index]
            assert [m.key for m in view.neutral] == [m.key for m in prompt]  # the very prompt billed
            billed = recorded.usage["prompt_tokens"] if recorded.usage else None
            if billed:
                errors.append(abs(view.tokens - billed) / billed * 100)
            await s.record(trajectory.messages[recorded.index], Usage.from_openai(recorded.usage))
            added = recorded.index + 1
    return errors


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name if p else "none")
async def test_without_a_tokenizer_a_live_session_counts_within_one_percent_after_three_calls(
    path: Path | None, tmp_path: Path
) -> None:
    path = path or require_shared("trajectories", "mini-swe-agent")
    (trajectory,) = load_trajectories(path)
    cm = ContextManager(  # no tokenizer: the family's default counter
        ModelSpec(trajectory.model, 10_000_000),
        config=ContextConfig(tool_result_limit=10_000_000, tool_result_limit_max_ratio=None),
        workspace=tmp_path / "ws",
    )
    errors = (await replay_billed(trajectory, cm))[3:]
    assert len(errors) >= 30
    # Per run; so overall too (a union of sets whose medians are at most 1 % has a median of at most 1 %).
    assert statistics.median(errors) <= 1.0
    assert max(errors) <= 5.0
    # `contextkeep count --calibrate` counts the same way, to the same figures.
    report = count_accuracy(trajectory, counter_for_model(trajectory.model, calibrate=True), warmup=3)
    assert [abs(c.error_pct) for c in report.scored] == errors
    cli = CliRunner().invoke(main, ["count", "--json", "--calibrate", str(path)])
    assert cli.exit_code == 0, cli.output
    row = json.loads(cli.output)
    assert row["median_abs_error_pct"] == round(statistics.median(errors), 3)
    assert row["max_abs_error_pct"] == round(max(errors), 3)


@pytest.mark.parametrize("name", ["django__django-11099.traj.json", "sqlfluff__sqlfluff-1625.traj.json"])
async def test_the_calibrated_count_stays_close_through_compaction(name: str, tmp_path: Path) -> None:
    path = require_shared("trajectories", "mini-swe-agent", name)
    require_shared("tokenizers", "deepseek_tokenizer.json")
    (trajectory,) = load_trajectories(path)
    provider = counter_for_model(trajectory.model, HFEncoder(DEEPSEEK_TOKENIZER))  # bills exactly as DeepSeek
    cm = ContextManager(
        ModelSpec(trajectory.model, 16_000),
        config=ContextConfig(reserved_tokens=2_000),
        workspace=tmp_path / "ws",
    )
    errors, compacted = [], 0
    async with cm.session("small-window") as s:
        added = 0
        for recorded in trajectory.calls:
            await s.add(trajectory.messages[added : recorded.index])
            view = await s.prepare(tools=trajectory.tools)
            billed = provider.count_prompt(view.neutral, trajectory.tools)
            errors.append(abs(view.tokens - billed) / billed * 100)
            compacted += bool(view.compacted)
            await s.record(trajectory.messages[recorded.index], Usage(input_tokens=billed, output_tokens=50))
            added = recorded.index + 1
    assert compacted >= 2
    assert statistics.median(errors[3:]) <= 1.0
    assert max(errors[3:]) <= 5.0
