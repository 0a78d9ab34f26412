"""A `tokenizer.json` counted with our own split gives exactly what `tokenizers` gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from contextkeep._tokens import HFEncoder, counter_for_model
from contextkeep._tokens._onig import VERIFIED_RANGES, translate
from contextkeep._tokens.framing import FoldState
from contextkeep.replay.trajectories import load_trajectories
from support import all_trajectory_files


def _variant(folder: Path, deepseek_tokenizer: Path, normalizer: dict[str, object]) -> Path:
    """DeepSeek's tokenizer.json with another normalizer (Qwen's files have NFC)."""
    config = json.loads(deepseek_tokenizer.read_text(encoding="utf-8"))
    config["normalizer"] = normalizer
    path = folder / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=["as published", "with an NFC normalizer"])
def tokenizer_json(
    request: pytest.FixtureRequest, deepseek_tokenizer: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    if request.param == "as published":
        return deepseek_tokenizer
    return _variant(tmp_path_factory.mktemp("nfc"), deepseek_tokenizer, {"type": "NFC"})


@pytest.fixture(scope="module")
def encoder(tokenizer_json: Path) -> HFEncoder:
    encoder = HFEncoder(tokenizer_json)
    assert encoder.splits_natively  # otherwise every comparison below would be `tokenizers` against itself
    return encoder


@pytest.fixture(scope="module")
def reference(tokenizer_json: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_json))


def _reference_counts(reference: Tokenizer, texts: list[str]) -> list[int]:
    return [len(e.ids) for e in reference.encode_batch(texts, add_special_tokens=False)]


@pytest.mark.slow
def test_every_trajectory_text_and_rendered_message_counts_the_same(
    encoder: HFEncoder, reference: Tokenizer
) -> None:
    texts: list[str] = []
    framing = counter_for_model("deepseek-chat", encoder).framing
    for path in all_trajectory_files():
        for trajectory in load_trajectories(path):
            state = FoldState()
            for m in trajectory.messages:
                texts += [m.text, *(c.arguments for c in m.tool_calls)]
                context, state = framing.step(m, state, has_tools=bool(trajectory.tools))
                texts.append(framing.render(m, context, in_last_turn=True)[0])  # holds added tokens
            texts.append(framing.fixed(trajectory.tools)[0])
    texts = [t for t in texts if t]
    assert len(texts) > 5000
    assert [encoder.count(t) for t in texts] == _reference_counts(reference, texts)


@pytest.mark.slow
def test_every_verified_character_splits_as_tokenizers_does(encoder: HFEncoder, reference: Tokenizer) -> None:
    # Each character alone, doubled, after a letter, a digit, a space and a newline, before a letter:
    # every class it could belong to shows up in how the text splits.
    texts = [
        f"{c} a{c}{c} 7{c} {c}x\n{c}. {c}" for lo, hi in VERIFIED_RANGES for c in map(chr, range(lo, hi + 1))
    ]
    assert [encoder.count(t) for t in texts] == _reference_counts(reference, texts)


_ALPHABET = st.sampled_from(
    [
        *"abcXYZ019 _-.,;:!?'\"()[]{}<>/\\|=+*&^%$#@~`\t\n\r\x0b\x0c\x1c\x1f\x85\xa0",
        *"éßñ中文字かなカナ한글",
        *"\u0301\u0308\u0323\u030a",  # combining marks: NFC composes them with what precedes
        "\u1100\u1161",  # jamo: compose to a syllable outside the verified blocks
        "\u2028",
        "\u3000",
        "１２",
        "，。",
        "▁",
        "｜",
        "😀",
        "\U0001cecf",
        "\u0301",
    ]
)
_ADDED = st.sampled_from(
    [
        "<｜begin▁of▁sentence｜>",
        "<｜tool▁sep｜>",
        "<|EOT|>",
        "<think>",
        "</think>",
        "｜DSML｜",
        "<｜",
        "<|",
        "<th",
    ]
)


@pytest.mark.slow  # loads the DeepSeek tokenizer twice
@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_ALPHABET, _ADDED, st.text(max_size=5)), max_size=40).map("".join))
def test_generated_text_counts_the_same(encoder: HFEncoder, reference: Tokenizer, text: str) -> None:
    assert encoder.count(text) == len(reference.encode(text, add_special_tokens=False).ids)


@pytest.mark.slow
def test_counts_stay_exact_when_the_memos_start_over(
    tokenizer_json: Path, reference: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("contextkeep._tokens._pieces._MAX_PIECES", 8)
    monkeypatch.setattr("contextkeep._tokens.encoders._MAX_SHORT", 8)
    encoder = HFEncoder(tokenizer_json)
    texts = [f"step {i}: ran `pytest -k case_{i}` -> {i * 7} passed, 0 failed\n" * 3 for i in range(40)]
    lines = [line for t in texts for line in t.splitlines()]  # short texts: remembered whole
    assert [encoder.count(t) for t in texts * 2] == _reference_counts(reference, texts * 2)
    assert [encoder.count(t) for t in lines * 2] == _reference_counts(reference, lines * 2)


@pytest.mark.slow
def test_a_pipeline_it_cannot_follow_is_left_to_tokenizers(tmp_path: Path, deepseek_tokenizer: Path) -> None:
    path = _variant(tmp_path, deepseek_tokenizer, {"type": "NFKC"})
    encoder = HFEncoder(path)
    assert not encoder.splits_natively
    text = "ﬁ ligature, ① circled, e\u0301 composed by the normalizer"
    reference = Tokenizer.from_file(str(path))
    assert encoder.count(text) == len(reference.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize(
    "pattern",
    [
        r"\d+",
        r"\w+",
        r"\p{Han}+",
        r"[\P{L}x]",
        r"[\S]",
        r"[[a-z]--[aeiou]]",
        r"a\b",
        r"[unclosed",
        r"(?i:'s|'t)|\p{L}+",  # Llama 3's contractions: the engines fold case differently
    ],
)
def test_patterns_outside_the_translated_subset_are_refused(pattern: str) -> None:
    assert translate(pattern) is None


def test_property_classes_become_ranges_over_the_verified_blocks() -> None:
    import re

    import regex  # understands the Oniguruma-style classes natively: the reference

    pattern = r"[^\r\n\p{L}\p{P}]?\p{N}{1,3}|\s+(?!\S)|[\p{L}\p{M}]+|\p{S}"
    translated = translate(pattern)
    assert translated is not None
    for text in ["x12345  \u3000y", "café — «ok» ±1½ 中文 ｱ", "a\x1c\x1fb \u2028\u205f"]:
        assert re.findall(translated, text) == regex.findall(pattern, text)
