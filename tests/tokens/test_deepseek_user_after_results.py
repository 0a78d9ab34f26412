"""DeepSeek bills a user message that follows tool results one token below the published template.

Held-out run django-13964 showed it: the local count was exactly +1 on every call after the
first user message that followed a tool result (the results' closing `</think>`, which opens
a reply that never came, is not in the prompt). The shared DeepSeek runs never have that
transition, so it is made in one of them: a user message is put after a run of results, and
every later call must grow by exactly what the message itself takes, one token fewer than
its template text, computed here with the tokenizer alone.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from contextkeep._messages import Message
from contextkeep._tokens import DeepSeekFraming, HFEncoder, PromptCounter
from contextkeep.replay.trajectories import load_trajectories
from support import require_shared

NUDGE = "Please run the test suite before you go on."
TEMPLATE_TEXT = f"<｜User｜>{NUDGE}<｜Assistant｜></think>"


def test_a_user_message_after_tool_results_adds_one_token_less_to_every_later_call(
    deepseek_tokenizer: Path,
) -> None:
    path = require_shared("trajectories", "mini-swe-agent", "django__django-14997.traj.json")
    (trajectory,) = load_trajectories(path)
    messages = trajectory.messages
    # After the results of the fifth call: the next message is the model's reply.
    ends = [i + 1 for i, m in enumerate(messages[:-1]) if m.role == "tool" and messages[i + 1].role != "tool"]
    cut = ends[4]
    assert messages[cut].role == "assistant"
    nudged = [*messages[:cut], Message("user", NUDGE), *messages[cut:]]
    template = len(
        Tokenizer.from_file(str(deepseek_tokenizer)).encode(TEMPLATE_TEXT, add_special_tokens=False)
    )

    encoder = HFEncoder(deepseek_tokenizer)
    plain, with_nudge = PromptCounter(encoder, DeepSeekFraming()), PromptCounter(encoder, DeepSeekFraming())
    later = [c.index for c in trajectory.confirmed_calls if c.index > cut]
    assert len(later) >= 30
    growth = {
        with_nudge.count_prompt(nudged[: index + 1], trajectory.tools)
        - plain.count_prompt(messages[:index], trajectory.tools)
        for index in later
    }
    assert growth == {template - 1}
    # Counted incrementally above, as a session does; a fresh count of the last prompt agrees.
    fresh = PromptCounter(encoder, DeepSeekFraming()).count_prompt(nudged[: later[-1] + 1], trajectory.tools)
    assert fresh == with_nudge.count_prompt(nudged[: later[-1] + 1], trajectory.tools)
    # The prompt that ends with the nudge (the call right after it) too.
    assert (
        with_nudge.count_prompt(nudged[: cut + 1], trajectory.tools)
        - plain.count_prompt(messages[:cut], trajectory.tools)
        == template - 1
    )


def test_the_shared_runs_still_count_exactly_where_replies_follow_results(deepseek_tokenizer: Path) -> None:
    path = require_shared("trajectories", "mini-swe-agent", "django__django-11099.traj.json")
    (trajectory,) = load_trajectories(path)
    counter = PromptCounter(HFEncoder(deepseek_tokenizer), DeepSeekFraming())
    for recorded in trajectory.confirmed_calls:
        billed = recorded.usage["prompt_tokens"] if recorded.usage else None
        assert counter.count_prompt(trajectory.messages[: recorded.index], trajectory.tools) == billed
