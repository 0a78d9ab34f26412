"""A short `benchmarks/bench_server_load.py` load run: the server's memory stays flat under load.

The full run (16 clients, 60 s, then 5,000 stored conversations at rest) is the benchmark;
this runs the same code small, with a bound generous enough for a busy machine. That a resting
server does no store work is `test_idle_poll` (counted calls, not CPU time).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from contextkeep.testing import FakeLLMServer
from support import REPO

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location(
    "bench_server_load", REPO / "benchmarks" / "bench_server_load.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # its dataclasses look their module up
_spec.loader.exec_module(bench)


def test_rss_stays_flat_once_the_kept_conversations_are_full(tmp_path):
    store, workspace = f"sqlite:///{tmp_path / 'load.db'}", tmp_path / "ws"
    with FakeLLMServer(context_window=4_096) as upstream:
        server = bench.Served(store, workspace, upstream.base_url, ("--max-conversations", "16"))
        try:
            warm = bench.load(server, clients=4, seconds=4)
            assert warm.errors == 0
            start = bench.rss_mib(server.proc.pid)
            run = bench.load(server, clients=4, seconds=8)
        finally:
            server.stop()
    assert run.errors == 0 and run.requests > 16 * 4  # several times the kept conversations
    assert run.rss[-1][1] - start < 25, run.rss  # MiB; the cap holds what a conversation leaves behind
