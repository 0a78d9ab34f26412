"""The dashboard in headless Chromium follows the newest active conversation and replays its past."""

from __future__ import annotations

import asyncio
import struct
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from support.dashboard_data import MODEL, WINDOW, agent_run

pytestmark = [pytest.mark.slow, pytest.mark.services]


def painted_pixels(png: bytes) -> int:
    """Pixels of an RGB(A) PNG that are not the white background (8-bit, non-interlaced, as Chromium writes)."""
    width, height, depth, color = struct.unpack(">IIBB", png[16:26])
    assert depth == 8 and color in (2, 6), (depth, color)
    channels = 3 if color == 2 else 4
    data = zlib.decompress(b"".join(_chunks(png, b"IDAT")))
    stride, previous, painted = width * channels, bytearray(width * channels), 0
    for row in range(height):
        kind, line = (
            data[row * (stride + 1)],
            bytearray(data[row * (stride + 1) + 1 : (row + 1) * (stride + 1)]),
        )
        _unfilter(kind, line, previous, channels)
        painted += sum(1 for i in range(0, stride, channels) if line[i : i + 3] != b"\xff\xff\xff")
        previous = line
    return painted


def _chunks(png: bytes, wanted: bytes) -> list[bytes]:
    out, at = [], 8
    while at < len(png):
        (size,) = struct.unpack(">I", png[at : at + 4])
        if png[at + 4 : at + 8] == wanted:
            out.append(png[at + 8 : at + 8 + size])
        at += 12 + size
    return out


def _unfilter(kind: int, line: bytearray, up: bytearray, bpp: int) -> None:
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        above, corner = up[i], up[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 255
        elif kind == 2:
            line[i] = (line[i] + above) & 255
        elif kind == 3:
            line[i] = (line[i] + (left + above) // 2) & 255
        elif kind == 4:
            p = left + above - corner
            pa, pb, pc = abs(p - left), abs(p - above), abs(p - corner)
            line[i] = (line[i] + (left if pa <= pb and pa <= pc else above if pb <= pc else corner)) & 255


def _write(store: str, workspace: Path, *runs: tuple[str, int]) -> None:
    with ThreadPoolExecutor(1) as pool:  # playwright's sync API holds this thread's event loop
        for conversation, steps in runs:
            pool.submit(asyncio.run, agent_run(store, workspace, conversation, steps)).result(120)


def test_opens_on_the_newest_conversation_and_replays_its_past(browser, tmp_path):
    store, workspace = f"sqlite:///{tmp_path / 'ck.db'}", tmp_path / "ws"
    _write(store, workspace, ("zzz-newer", 0), ("aaa-older", 20), ("zzz-newer", 70))
    settings = ServerSettings(store=store, workspace=str(workspace), model=MODEL, window=WINDOW)
    with BackgroundServer(create_app(settings)) as server:
        past = httpx.get(f"{server.url}/api/conversations/zzz-newer/history").json()
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(server.url)  # no conversation named: the one worked on last
        for opened in ("first load", "reload"):
            page.wait_for_selector("#events li.replayed")
            assert page.locator("#conversation").input_value() == "zzz-newer", opened
            replayed = page.locator("#events li.replayed")
            assert replayed.count() == min(len(past["events"]), 50), opened
            assert replayed.first.get_attribute("data-type") == "context.status"  # newest first
            page.reload()
        assert page.url.endswith("/")  # following, not pinned: a reload follows again

        page.wait_for_selector("#chart svg polyline")
        points = page.locator("#chart polyline.view").get_attribute("points").split()
        assert len(points) == len(past["chart"]["points"])
        assert page.locator("#chart circle.marker").count() == len(past["chart"]["markers"])
        assert page.locator("#chart line.limit").count() == 3  # budget, trigger, target
        chart = page.locator("#chart svg")
        box = chart.bounding_box()
        assert box["width"] > 100 and box["height"] > 50
        assert painted_pixels(chart.screenshot()) > 500  # a drawn line, not a blank box

        assert page.locator("#capacity").inner_text() == f"{WINDOW:,} tokens · source: explicit"
        assert page.locator('#saved li[data-layer="L0"]').count() == 1
        assert page.locator('#saved li[data-layer="L2"]').inner_text().startswith("L2 −")

        records = len(httpx.get(f"{server.url}/api/conversations/zzz-newer/compactions").json()["records"])
        assert records > 10
        first_page = page.locator("#timeline tbody tr").all_inner_texts()
        assert len(first_page) == 10
        assert page.locator("#timeline-newer").is_disabled()
        page.locator("#timeline-older").click()
        second = page.locator("#timeline tbody tr")
        assert second.count() == min(records - 10, 10)
        assert second.all_inner_texts() != first_page
        assert "page 2 of" in page.locator("#timeline-page").inner_text()


def test_switches_to_a_conversation_that_becomes_active_unless_one_is_named(browser, tmp_path):
    store, workspace = f"sqlite:///{tmp_path / 'ck.db'}", tmp_path / "ws"
    _write(store, workspace, ("aaa-older", 4), ("zzz-newer", 4))
    settings = ServerSettings(
        store=store, workspace=str(workspace), model=MODEL, window=WINDOW, poll_interval=0.2
    )
    with BackgroundServer(create_app(settings)) as server:
        following, named = browser.new_page(), browser.new_page()
        following.goto(server.url)
        named.goto(f"{server.url}#aaa-older")
        for page in (following, named):
            page.wait_for_selector("#connection[data-live='true']")
        assert named.locator("#conversation").input_value() == "aaa-older"
        # A third conversation starts while the dashboards watch.
        done = threading.Event()

        def work() -> None:
            asyncio.run(agent_run(store, workspace, "mmm-live", 6))
            done.set()

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        following.wait_for_function(
            "document.getElementById('conversation').value === 'mmm-live'", timeout=30_000
        )
        worker.join(60)
        assert done.is_set()
        named.wait_for_selector('#conversation option[value="mmm-live"]', state="attached")
        assert named.locator("#conversation").input_value() == "aaa-older"
        following.locator("#conversation").select_option("zzz-newer")  # the user's pick is kept
        assert following.url.endswith("#zzz-newer")
