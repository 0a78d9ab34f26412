"""`contextkeep serve` as a user runs it: the token stays out of the access log; the allow-list is honoured."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

TOKEN = "s3cret-dashboard-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_token_is_kept_out_of_the_access_log_and_allowed_hosts_come_from_the_environment(tmp_path):
    port = free_port()
    exe = Path(sys.executable).with_name("contextkeep")
    command = [str(exe), "serve", "--port", str(port), "--store", f"sqlite:///{tmp_path / 'ck.db'}"]
    command += ["--workspace", str(tmp_path / "ws"), "--max-body", "4096"]
    env = {
        **os.environ,
        "CONTEXTKEEP_TOKEN": TOKEN,
        "CONTEXTKEEP_ALLOWED_HOSTS": "dash.example other.example",
        "CONTEXTKEEP_HOME": str(tmp_path / "home"),
    }
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                httpx.get(f"{base}/api/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        opened = httpx.get(f"{base}/?token={TOKEN}", follow_redirects=False)
        assert opened.status_code == 303 and TOKEN in opened.headers["set-cookie"]
        bearer = {"authorization": f"Bearer {TOKEN}"}
        allowed = httpx.get(f"{base}/api/health", headers={**bearer, "host": "dash.example"})
        assert allowed.json()["ok"] is True
        assert httpx.get(f"{base}/api/health", headers={**bearer, "host": "evil.example"}).status_code == 421
        big = httpx.post(f"{base}/v1/chat/completions", json={"x": "y" * 5000}, headers=bearer)
        assert big.status_code == 413
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert "GET /?token=*** HTTP/1.1" in output, output
    assert TOKEN not in output
