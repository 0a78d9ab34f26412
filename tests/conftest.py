"""Shared test setup: offline tokenizers, the shared trajectories, and service skips."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TOKENIZERS = SHARED / "tokenizers"
TRAJECTORIES = SHARED / "trajectories"
DEEPSEEK_TOKENIZER = TOKENIZERS / "deepseek_tokenizer.json"

# Real encodings load offline from the shared folder (tiktoken's own cache keys).
if TOKENIZERS.is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(TOKENIZERS))

# In CI every "server unreachable" skip becomes a failure, so nothing is silently untested.
REQUIRE_SERVICES = os.environ.get("CONTEXTKEEP_REQUIRE_SERVICES") == "1"


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


@pytest.fixture(scope="session")
def deepseek_tokenizer() -> Path:
    """The DeepSeek tokenizer.json, or skip."""
    return require_shared("tokenizers", "deepseek_tokenizer.json")
