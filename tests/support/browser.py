"""Headless Chromium for the dashboard's browser tests (Debian's package, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

from support.shared import service_unavailable

__all__ = ["ARGS", "CHROMIUM", "chromium"]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium(extra_args: Sequence[str] = ()) -> Iterator[Any]:
    """A launched browser (for a fixture to yield); skips, or fails in CI, without Chromium."""
    if not os.path.exists(CHROMIUM) and not shutil.which("chromium"):
        service_unavailable("chromium", f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        service_unavailable("playwright", f"the Python package is missing ({exc})")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium") or CHROMIUM, args=[*ARGS, *extra_args]
        )
        yield browser
        browser.close()
