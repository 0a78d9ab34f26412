"""The shared test data beside the checkout (tokenizers, trajectories) and service skips."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# tests/support/shared.py -> the repository -> its parent, where the workspace keeps ../shared.
REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
TOKENIZERS = SHARED / "tokenizers"
TRAJECTORIES = SHARED / "trajectories"
DEEPSEEK_TOKENIZER = TOKENIZERS / "deepseek_tokenizer.json"

# The servers some backends need; a test parameter naming one is marked `services`.
SERVERS = frozenset({"postgresql", "mariadb", "redis"})

# In CI every "server unreachable" skip becomes a failure, so nothing is silently untested.
REQUIRE_SERVICES = os.environ.get("CONTEXTKEEP_REQUIRE_SERVICES") == "1"


def use_offline_tokenizers() -> None:
    """Point tiktoken at the shared folder (its own cache keys), so real encodings load offline."""
    if TOKENIZERS.is_dir():
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(TOKENIZERS))


def require_shared(*parts: str) -> Path:
    """The shared data path, or skip (a user's machine has no ../shared)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared test data not found at {path} (only present in the project's workspace)")
    return path


def service_unavailable(name: str, reason: str) -> None:
    """Skip on a user's machine; fail in CI."""
    message = f"{name} unreachable: {reason}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (CONTEXTKEEP_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def backends(*names: str) -> list[object]:
    """`names` as test parameters; each naming a server carries the `services` marker."""
    return [pytest.param(name, marks=pytest.mark.services) if name in SERVERS else name for name in names]


def mini_swe_agent_files() -> list[Path]:
    """The DeepSeek trajectories with provider usage."""
    folder = TRAJECTORIES / "mini-swe-agent"
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.glob("*.traj.json") if p.name not in ("github_issue.traj.json", "local.traj.json")
    )


def all_trajectory_files() -> list[Path]:
    """Every shared trajectory file."""
    if not TRAJECTORIES.is_dir():
        return []
    return sorted(p for p in TRAJECTORIES.rglob("*") if p.suffix in (".json", ".traj"))
