"""Token counting: exact against DeepSeek's billed usage, calibrated estimates, count-once caching."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import tiktoken

from contextkeep._errors import ConfigError, TokenizerError
from contextkeep._messages import Message, ToolCall
from contextkeep._tokens import (
    CalibratedCounter,
    CountSource,
    DeepSeekFraming,
    HeuristicEncoder,
    HFEncoder,
    OpenAIFraming,
    PromptCounter,
    TiktokenEncoder,
    counter_for_model,
    encoder_from_spec,
    encoding_for_model,
)
from contextkeep.replay.accuracy import count_accuracy
from contextkeep.replay.trajectories import load_trajectories
from support import RecordingEncoder, mini_swe_agent_files, require_shared

FILES: list[Path | None] = [*mini_swe_agent_files()] or [None]


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "none")
def test_deepseek_counts_match_the_providers_prompt_tokens(
    path: Path | None, deepseek_tokenizer: Path
) -> None:
    path = path or require_shared("trajectories", "mini-swe-agent")
    (trajectory,) = load_trajectories(path)
    counter = counter_for_model(trajectory.model, HFEncoder(deepseek_tokenizer))
    report = count_accuracy(trajectory, counter)
    assert len(report.calls) == len(trajectory.confirmed_calls) >= 30
    assert report.median_abs_error_pct <= 1.0
    assert report.max_abs_error_pct <= 3.0


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "none")
def test_calibrated_heuristic_is_within_five_percent_after_three_calls(path: Path | None) -> None:
    path = path or require_shared("trajectories", "mini-swe-agent")
    (trajectory,) = load_trajectories(path)
    plain = count_accuracy(trajectory, counter_for_model(trajectory.model, "heuristic"))
    calibrated = count_accuracy(
        trajectory, counter_for_model(trajectory.model, "heuristic", calibrate=True), warmup=3
    )
    assert calibrated.median_abs_error_pct <= 5.0
    assert calibrated.median_abs_error_pct < plain.median_abs_error_pct


def test_incremental_counting_equals_a_fresh_count_after_any_edit(deepseek_tokenizer: Path) -> None:
    path = require_shared("trajectories", "mini-swe-agent", "django__django-11099.traj.json")
    (trajectory,) = load_trajectories(path)
    encoder = HFEncoder(deepseek_tokenizer)
    incremental = PromptCounter(encoder, DeepSeekFraming())
    messages = trajectory.messages
    prompts = [messages[:n] for n in range(2, len(messages), 7)]
    # Compaction-like edits: the middle of the prompt changes in place (masking; a message turned
    # into a user message; an assistant losing its tool call), then it grows again.
    edited = [*messages[:3], messages[3].with_text("[masked]"), *messages[4:30]]
    turned = [*edited[:5], Message("user", "now a user message"), *edited[6:]]
    no_calls = [*turned[:8], Message("assistant", "no call"), *turned[9:]]
    for prompt in [
        *prompts,
        messages[:30],
        edited,
        turned,
        no_calls,
        no_calls + messages[30:35],
        messages[:10],
    ]:
        fresh = PromptCounter(encoder, DeepSeekFraming())
        assert incremental.count_prompt(prompt, trajectory.tools) == fresh.count_prompt(
            prompt, trajectory.tools
        )


def test_a_list_edited_in_place_between_two_counts_is_counted_as_it_now_is() -> None:
    history = [Message("system", "s"), Message("user", "u")]
    for i in range(4):
        history += [
            Message("assistant", f"step {i}", tool_calls=(ToolCall(f"c{i}", "bash", "{}"),)),
            Message("tool", f"output {i} " * 30, tool_call_id=f"c{i}"),
        ]
    counter = PromptCounter(HeuristicEncoder(), DeepSeekFraming())
    counter.count_prompt(history)
    history[3] = history[3].with_text("[masked]")  # the caller's own list, edited in place
    history.append(Message("user", "next"))
    assert counter.count_prompt(history) == PromptCounter(HeuristicEncoder(), DeepSeekFraming()).count_prompt(
        history
    )


def test_an_in_place_rewrite_that_changes_the_framing_is_recounted_from_there() -> None:
    # Two results close the call group of an assistant with two calls; with one call the first does.
    def prompt(calls: int) -> list[Message]:
        made = tuple(ToolCall(f"c{i}", "bash", "{}") for i in range(calls))
        return [
            Message("system", "s"),
            Message("user", "u"),
            Message("assistant", "a", tool_calls=made),
            Message("tool", "r0", tool_call_id="c0"),
            Message("tool", "r1", tool_call_id="c1"),
        ]

    counter = PromptCounter(HeuristicEncoder(), DeepSeekFraming())
    for calls in (2, 1, 2):
        fresh = PromptCounter(HeuristicEncoder(), DeepSeekFraming()).count_prompt(prompt(calls))
        assert counter.count_prompt(prompt(calls)) == fresh


def test_thinking_mode_recounts_the_previous_turn_when_a_user_speaks(deepseek_tokenizer: Path) -> None:
    encoder = HFEncoder(deepseek_tokenizer)
    counter = PromptCounter(encoder, DeepSeekFraming(thinking=True))
    turn = [Message("user", "q1"), Message("assistant", "a1", reasoning="long private reasoning " * 20)]
    with_reasoning = counter.count_prompt(turn)
    after_next_user = counter.count_prompt([*turn, Message("user", "q2")])
    fresh = PromptCounter(encoder, DeepSeekFraming(thinking=True)).count_prompt(
        [*turn, Message("user", "q2")]
    )
    assert after_next_user == fresh
    # The old turn's reasoning leaves the prompt once a new user message arrives.
    assert after_next_user < with_reasoning


def test_messages_are_encoded_once() -> None:
    encoder = RecordingEncoder()
    calls = encoder.encoded
    counter = PromptCounter(encoder, OpenAIFraming())
    history = [Message("system", "s"), Message("user", "u")]
    for i in range(50):
        history.append(Message("assistant", f"reply {i}"))
        counter.count_prompt(history)
    assert len(calls) == len(history) + 1  # each message once, plus the fixed part once


def test_warming_counts_stand_ins_in_context_so_swapping_them_in_encodes_nothing() -> None:
    encoder = RecordingEncoder()
    calls = encoder.encoded
    counter = PromptCounter(encoder, DeepSeekFraming())
    previews: dict[str, Message] = {}

    def stand_in(m: Message) -> Message | None:
        if m.role != "tool":
            return None
        return previews.setdefault(m.key, m.with_text(m.text[:10] + " [masked]"))

    counter.stand_in = stand_in
    history = [Message("system", "s"), Message("user", "u")]
    for i in range(6):
        history.append(Message("assistant", f"step {i}", tool_calls=(ToolCall(f"c{i}", "bash", "{}"),)))
        history.append(Message("tool", f"output {i} " * 50, tool_call_id=f"c{i}"))
        counter.count_prompt(history)
        before = len(calls)
        counter.warm()  # a session runs this while the model call is in flight
        assert len(calls) == before + 1  # the new tool output's preview, nothing else
    masked = [previews.get(m.key, m) for m in history[:-4]] + history[-4:]
    assert sum(a is not b for a, b in zip(masked, history, strict=True)) == 4
    encoded = len(calls)
    assert counter.count_prompt(masked) == PromptCounter(HeuristicEncoder(), DeepSeekFraming()).count_prompt(
        masked
    )
    assert len(calls) == encoded  # every preview was counted in its context ahead of the pass


def test_special_token_strings_in_openai_content_count_as_text() -> None:
    # OpenAI encodes "<|endoftext|>" typed into a message as ordinary text, never as the special token.
    encoder = TiktokenEncoder("o200k_base")
    assert encoder.count("<|endoftext|>") > 1  # the special token would be one


def test_short_texts_counted_again_count_the_same_when_the_memo_starts_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("contextkeep._tokens.encoders._MAX_SHORT", 8)
    encoder, reference = TiktokenEncoder("o200k_base"), tiktoken.get_encoding("o200k_base")
    lines = [f"{i}: assert total({i * 7}) == {i}  # <|endoftext|>" for i in range(20)] + ["x" * 300]
    expected = [len(reference.encode_ordinary(line)) for line in lines]
    assert [encoder.count(line) for line in lines * 3] == expected * 3


def test_openai_framing_counts_roles_names_calls_and_tools() -> None:
    counter = PromptCounter(TiktokenEncoder("o200k_base"), OpenAIFraming())
    plain = counter.count_prompt([Message("user", "hello world")])
    assert plain == 3 + counter.count_text("user") + counter.count_text("hello world") + 3
    named = counter.count_prompt([Message("user", "hello world", name="bob")])
    assert named == plain + 1
    with_call = counter.count_prompt(
        [Message("assistant", None, tool_calls=(ToolCall("c", "ls", '{"p": 1}'),))]
    )
    assert with_call > counter.count_prompt([Message("assistant", None)])
    tools = [
        {
            "type": "function",
            "function": {
                "name": "ls",
                "description": "list files",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "dir"}},
                },
            },
        }
    ]
    assert counter.count_prompt([Message("user", "hello world")], tools) > plain + 10


def test_encoding_by_model_family_and_specs(tmp_path: Path) -> None:
    assert encoding_for_model("gpt-4o-mini") == "o200k_base"
    assert encoding_for_model("openai/gpt-5") == "o200k_base"
    assert encoding_for_model("gpt-4-turbo") == "cl100k_base"
    assert TiktokenEncoder.for_model("gpt-3.5-turbo").name == "tiktoken:cl100k_base"
    assert counter_for_model("gpt-4.1").source is CountSource.LOCAL_TOKENIZER
    assert counter_for_model("qwen-max").source is CountSource.ESTIMATE
    assert encoder_from_spec("heuristic:3").name == "heuristic:3:cjk"
    for bad in ("nonsense", "heuristic:x"):
        with pytest.raises(TokenizerError):
            encoder_from_spec(bad)
    with pytest.raises(TokenizerError, match=r"cannot load tokenizer\.json"):
        HFEncoder(tmp_path / "missing.json")
    with pytest.raises(TokenizerError, match="cannot load tiktoken encoding"):
        TiktokenEncoder("no_such_encoding")


def test_heuristic_counts_cjk_characters_one_each() -> None:
    enc = HeuristicEncoder()
    assert enc.count("abcdefgh") == 2
    assert enc.count("上下文管理") == 5
    assert enc.count("上下文 window") == 3 + 2
    assert HeuristicEncoder(cjk_aware=False).count("上下文管理") == 2


def test_calibration_is_clamped_and_validated() -> None:
    counter = CalibratedCounter(HeuristicEncoder(), OpenAIFraming(), max_ratio=1.5)
    prompt = [Message("user", "x" * 400)]
    counter.observe(prompt, None, 10 * counter.count_prompt(prompt))
    assert counter.ratio == 1.5
    counter.observe(prompt, None, 0)  # nothing learned from an empty count
    assert (counter.ratio, counter.samples) == (1.5, 1)
    with pytest.raises(ConfigError, match="smoothing"):
        CalibratedCounter(HeuristicEncoder(), OpenAIFraming(), smoothing=0)


def test_median_error_figures_are_what_the_cli_reports(deepseek_tokenizer: Path) -> None:
    path = require_shared("trajectories", "mini-swe-agent", "django__django-13658.traj.json")
    (trajectory,) = load_trajectories(path)
    report = count_accuracy(
        trajectory, counter_for_model(trajectory.model, "heuristic", calibrate=True), warmup=3
    )
    assert report.median_abs_error_pct == pytest.approx(
        statistics.median(abs(c.error_pct) for c in report.calls[3:])
    )


@pytest.mark.parametrize("thinking", [False, True])
def test_front_edits_reuse_the_unchanged_tail_exactly(deepseek_tokenizer: Path, thinking: bool) -> None:
    path = require_shared("trajectories", "mini-swe-agent", "django__django-11099.traj.json")
    (trajectory,) = load_trajectories(path)
    messages = trajectory.messages[:60]
    encoder = HFEncoder(deepseek_tokenizer)
    counter = PromptCounter(encoder, DeepSeekFraming(thinking=thinking))
    masked = [m.with_text("[masked]") if i in (4, 6, 8) else m for i, m in enumerate(messages)]
    dropped = [*messages[:2], Message("user", "[dropped 4 rounds]"), *messages[10:]]
    for prompt in (messages, masked, dropped, masked, messages):
        fresh = PromptCounter(encoder, DeepSeekFraming(thinking=thinking)).count_prompt(
            prompt, trajectory.tools
        )
        assert counter.count_prompt(prompt, trajectory.tools) == fresh
        totals = counter.last_totals(prompt)
        assert totals is not None and totals[-1] + counter.count_tools(trajectory.tools) == fresh
        assert counter.last_totals(list(prompt)) is None  # another prompt, however alike
