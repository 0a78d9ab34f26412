"""In headless Chromium: a page from another origin cannot use the proxy, nor read the API by rebinding DNS."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from contextkeep.testing import FakeLLMServer
from support.browser import chromium
from support.stub_http import QuietHandler, stub_server

pytestmark = [pytest.mark.slow, pytest.mark.services]

REBOUND = "rebind.test"  # an attacker's name, resolved (by Chromium's rules below) to this machine
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "spend the server's key"}]}

ATTACK = """async (target) => {
  const body = JSON.stringify(CHAT_JSON);
  const url = target + "/v1/chat/completions";
  const outcomes = [];
  const attempt = async (name, init) => {
    try {
      const r = await fetch(url, init);
      outcomes.push(`${name}: ${r.type} ${r.status}`);
    } catch (e) {
      outcomes.push(`${name}: ${e.name}`);
    }
  };
  // No preflight: the browser sends it, the page cannot read the answer (the reported attack).
  await attempt("no-cors text/plain", { method: "POST", mode: "no-cors", body,
    headers: { "Content-Type": "text/plain" } });
  await attempt("no-cors form", { method: "POST", mode: "no-cors",
    body: new URLSearchParams({ payload: body }) });
  // Preflighted: JSON with a conversation id.
  await attempt("cors json", { method: "POST", body,
    headers: { "Content-Type": "application/json", "X-Conversation-Id": "stolen" } });
  return outcomes;
}""".replace("CHAT_JSON", json.dumps(CHAT))


class _Page(QuietHandler):
    def do_GET(self) -> None:
        page = b"<!doctype html><title>elsewhere</title><p>an unrelated site</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """Another origin: a tiny web server on another port."""
    with stub_server(_Page) as url:
        yield url


@pytest.fixture
def browser() -> Iterator[Any]:
    """Chromium resolving the rebinding name to loopback, as a DNS-rebinding attacker's page would."""
    yield from chromium([f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"])


def test_a_page_elsewhere_cannot_use_the_proxy_or_rebind_to_the_api(browser, elsewhere, start_proxy):
    upstream = FakeLLMServer(context_window=4_096)
    server = start_proxy(upstream, upstream_api_key="sk-server-secret", window=4_096)
    page = browser.new_page()
    page.goto(elsewhere)
    outcomes = page.evaluate(ATTACK, server.url)
    assert len(outcomes) == 3, outcomes
    assert outcomes[2] == "cors json: TypeError", outcomes  # the preflight found no permission
    assert [r.path for r in upstream.requests if r.path != "/v1/models"] == []

    # DNS rebinding: the attacker's name now points at this machine; the page is same-origin.
    answer = page.goto(f"http://{REBOUND}:{server.port}/api/conversations")
    assert answer is not None and answer.status == 421
    assert page.evaluate("() => fetch('/api/health').then((r) => r.status)") == 421

    # The dashboard itself, opened as usual, works.
    assert page.goto(f"{server.url}/api/health").status == 200
    assert page.evaluate("() => fetch('/api/health').then((r) => r.json())")["ok"] is True
