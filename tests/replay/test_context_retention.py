"""Whole-token and context FRR: a bare list of names does not count as keeping them."""

from __future__ import annotations

from pathlib import Path

from contextkeep._messages import Message, ToolCall
from contextkeep._offload.workspace import LocalWorkspace
from contextkeep.replay._context import normalise
from contextkeep.replay._retention import Retention, RetentionProbe

OUTPUT = (
    "Traceback (most recent call last):\n"
    '  File "src/shop/cart.py", line 120, in compute_total_price\n'
    "    total = sum(item.price for item in items)\n"
    "AttributeError: 'dict' object has no attribute 'price'"
)
COMMAND = "python -m pytest tests/test_cart.py"


def _transcript() -> list[Message]:
    call = ToolCall(id="c1", name="bash", arguments=f'{{"command": "{COMMAND}"}}')
    return [
        Message(role="system", content="You fix bugs.", id="s"),
        Message(role="user", content="Fix the cart total.", id="u"),
        Message(role="assistant", content="Running the tests.", tool_calls=(call,), id="a1"),
        Message(role="tool", tool_call_id="c1", content=OUTPUT, id="t1"),
        Message(
            role="assistant",
            content="compute_total_price in src/shop/cart.py raises AttributeError.",
            id="a2",
        ),
    ]


def _probes(view_tail: list[Message]) -> list[RetentionProbe]:
    transcript = _transcript()
    view = [*transcript[:3], *view_tail]
    return Retention(transcript).probes(0, 4, view)


def _shares(probes: list[RetentionProbe]) -> tuple[float, float, float]:
    n = len(probes)
    return (
        sum(p.in_view for p in probes) / n,
        sum(p.whole for p in probes) / n,
        sum(p.in_context for p in probes) / n,
    )


def test_a_bare_list_of_the_names_passes_substring_frr_but_not_context_frr() -> None:
    names = "Names seen: compute_total_price, src/shop/cart.py, AttributeError, 120."
    probes = _probes([Message(role="tool", tool_call_id="c1", content=names, id="t1")])
    assert {p.term for p in probes} == {"compute_total_price", "src/shop/cart.py", "AttributeError"}
    assert _shares(probes) == (1.0, 1.0, 0.0)


def test_a_verbatim_copy_scores_one_on_every_retention_metric() -> None:
    # The output is not shown as recorded (its message was rewritten), but its text is all there,
    # JSON-escaped and re-indented, as a digest or a summary quoting it would carry it.
    quoted = "Earlier output: " + OUTPUT.replace("\n", "\\n").replace('"', '\\"').replace("    ", "  ")
    probes = _probes([Message(role="tool", tool_call_id="c1", content=quoted, id="t1")])
    assert len(probes) == 3
    assert _shares(probes) == (1.0, 1.0, 1.0)


def test_a_name_inside_a_longer_name_is_in_view_but_not_whole() -> None:
    probes = _probes([Message(role="tool", tool_call_id="c1", content="see compute_total_prices", id="t1")])
    (probe,) = [p for p in probes if p.term == "compute_total_price"]
    assert probe.in_view and not probe.whole and not probe.in_context


def test_a_term_seen_earlier_only_inside_longer_text_is_no_probe() -> None:
    # `100,200p` holds `200` glued to a letter: a later "200 lines" does not reuse that item, and a
    # view quoting the output verbatim could never hold it as a whole token.
    call = ToolCall(id="c1", name="bash", arguments='{"command": "head src/shop/cart.py"}')
    body = "\n    return sum(item.price for item in items)  # see 100,200p"
    transcript = [
        *_transcript()[:2],
        Message(role="assistant", content="Reading.", tool_calls=(call,), id="a1"),
        Message(role="tool", tool_call_id="c1", content=f"def compute_total_price(items):{body}", id="t1"),
        Message(role="assistant", content="compute_total_price spans 200 lines.", id="a2"),
    ]
    quoted = Message(
        role="tool", tool_call_id="c1", content=f"(was) def compute_total_price(items):{body}", id="t1"
    )
    probes = Retention(transcript).probes(0, 4, [*transcript[:3], quoted])
    assert [p.term for p in probes] == ["compute_total_price"]
    assert _shares(probes) == (1.0, 1.0, 1.0)


def test_normalise_decodes_json_escapes_and_collapses_whitespace() -> None:
    assert normalise('a\\n\\t  b \\"c\\" \\u00e9\n\n d') == 'a b "c" é d'


async def _recoverable(tmp_path: Path, line: str) -> bool:
    """Whether the output's error name is recoverable from a view whose only trace of it is `line`."""
    workspace = LocalWorkspace(tmp_path)
    ref = await workspace.offload_tool_result("s1", "c1", OUTPUT)
    transcript = _transcript()
    retention = Retention(transcript)
    view = [*transcript[:2], Message(role="user", content=line.format(ref=ref), id="d")]
    (probe,) = [p for p in retention.probes(0, 4, view) if p.term == "AttributeError"]
    return (await retention.resolve(probe, workspace, {})).recoverable


async def test_recoverable_needs_one_output_reference_named_with_its_command(tmp_path: Path) -> None:
    assert await _recoverable(tmp_path / "a", f"- `{COMMAND}` → [Full detail available at: {{ref}}]")
    # The same reference without its command: the agent would have to know what it holds.
    assert not await _recoverable(
        tmp_path / "b", "[2 earlier rounds removed. [Full detail available at: {ref}]]"
    )
