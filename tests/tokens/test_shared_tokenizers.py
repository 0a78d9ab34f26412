"""A tokenizer is loaded once per process, however many sessions count with it."""

from __future__ import annotations

import shutil
from pathlib import Path

from contextkeep._messages import Message
from contextkeep._tokens import FallbackEncoder, HFEncoder, counter_for_model
from support import DEEPSEEK_TOKENIZER, require_shared


def _inner(counter: object) -> object:
    encoder = counter.encoder  # type: ignore[attr-defined]
    return encoder.encoder if isinstance(encoder, FallbackEncoder) else encoder


def test_sessions_share_one_loaded_tokenizer_json(tmp_path: Path) -> None:
    require_shared("tokenizers", "deepseek_tokenizer.json")
    spec = f"hf:{DEEPSEEK_TOKENIZER}"
    first, second = counter_for_model("deepseek-chat", spec), counter_for_model("deepseek-chat", spec)
    assert first is not second  # each session keeps its own counts ...
    assert isinstance(_inner(first), HFEncoder) and _inner(first) is _inner(second)  # ... over one tokenizer
    # Another file (even a copy) is another tokenizer.
    copy = tmp_path / "tokenizer.json"
    shutil.copy(DEEPSEEK_TOKENIZER, copy)
    other = counter_for_model("deepseek-chat", f"hf:{copy}")
    assert _inner(other) is not _inner(first)
    task = Message("user", "Find why build 4411 fails in src/build/runner.py")
    assert other.count_message(task) == first.count_message(task)


def test_tiktoken_encodings_are_shared_by_name() -> None:
    a, b = counter_for_model("gpt-4o"), counter_for_model("gpt-4o-mini")
    assert _inner(a) is _inner(b)
