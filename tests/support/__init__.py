"""Helpers shared by the test areas: builders, the shared data folder, service skips, SSE reading.

`support.store_worker` is imported on its own: it is also the script each worker process runs.
"""

from support.builders import (
    REFERENCE,
    RecordingEncoder,
    assert_references_readable,
    call,
    collect,
    manager,
    recording_manager,
    references,
    result,
    rounds,
)
from support.clients import closing
from support.serving import Event, SSECollector, types
from support.shared import (
    DEEPSEEK_TOKENIZER,
    REPO,
    REQUIRE_SERVICES,
    SERVERS,
    SHARED,
    TOKENIZERS,
    TRAJECTORIES,
    all_trajectory_files,
    backends,
    mini_swe_agent_files,
    require_shared,
    service_unavailable,
    use_offline_tokenizers,
)
from support.timing import TickingClock, wait_until

__all__ = [
    "DEEPSEEK_TOKENIZER",
    "REFERENCE",
    "REPO",
    "REQUIRE_SERVICES",
    "SERVERS",
    "SHARED",
    "TOKENIZERS",
    "TRAJECTORIES",
    "Event",
    "RecordingEncoder",
    "SSECollector",
    "TickingClock",
    "all_trajectory_files",
    "assert_references_readable",
    "backends",
    "call",
    "closing",
    "collect",
    "manager",
    "mini_swe_agent_files",
    "recording_manager",
    "references",
    "require_shared",
    "result",
    "rounds",
    "service_unavailable",
    "types",
    "use_offline_tokenizers",
    "wait_until",
]
