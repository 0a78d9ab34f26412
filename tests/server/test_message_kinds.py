"""The inspector's tag for each message says what compaction really did to it."""

from __future__ import annotations

from contextkeep._messages import ImagePart, Message, TextPart
from contextkeep.server.views import describe_message

IMAGE = ImagePart("data:image/png;base64,iVBORw0KGgo=", "image/png")


def test_an_unchanged_message_has_no_tag() -> None:
    m = Message(role="user", content="hello", id="m1")
    assert describe_message(m, m)["kind"] is None


def test_media_removed_only_where_an_image_was_removed() -> None:
    original = Message(role="user", content=(TextPart("look"), IMAGE), id="m1")
    without = Message(role="user", content=(TextPart("look"), TextPart("[image removed]")), id="m1")
    rewritten = Message(role="assistant", content="a shorter thought", id="m2")

    assert describe_message(without, original)["kind"] == "media_removed"
    # Text changed, nothing removed: not "media removed".
    assert (
        describe_message(rewritten, Message(role="assistant", content="a thought", id="m2"))["kind"]
        == "rewritten"
    )


def test_a_shortened_tool_output_is_masked_or_truncated() -> None:
    original = Message(role="tool", content="x" * 500, tool_call_id="c1", id="m3")
    masked = Message(
        role="tool", content="x" * 20 + " [Full detail available at: a.txt]", tool_call_id="c1", id="m3"
    )
    truncated = Message(role="tool", content="x" * 20 + "<<<TRUNCATED>>>", tool_call_id="c1", id="m3")

    assert describe_message(masked, original)["kind"] == "masked"
    assert describe_message(truncated, original)["kind"] == "truncated"
