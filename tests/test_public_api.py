"""Every public module exports exactly what it names, and nothing it names is missing."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import contextkeep

PUBLIC = sorted(
    m.name
    for m in pkgutil.walk_packages(contextkeep.__path__, "contextkeep.")
    if not any(part.startswith("_") for part in m.name.split("."))
)


@pytest.mark.parametrize("name", PUBLIC)
def test_all_lists_real_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == []
    assert len(set(exported)) == len(exported)


def _surface() -> list[str]:
    names = [f"contextkeep:{n}" for n in sorted(contextkeep.__all__)]
    for module in PUBLIC:
        names += [f"{module}:{n}" for n in sorted(importlib.import_module(module).__all__)]
    return names


def test_the_public_surface_is_the_checked_in_list() -> None:
    """A name added to or dropped from any `__all__` must be added to or dropped from the list too."""
    pinned = Path(__file__).with_name("public_api.txt").read_text().splitlines()
    expected = [line for line in pinned if line and not line.startswith("#")]
    assert _surface() == expected


def test_implementation_modules_are_private() -> None:
    """Only the package, its subpackages of their own (stores, models, …) and their modules are public."""
    top = {name.split(".")[1] for name in PUBLIC}
    assert top == {"integrations", "models", "replay", "server", "stores", "testing"}


def test_top_level_surface() -> None:
    for name in ("ContextManager", "ModelSpec", "classify_error", "Runner", "Agent", "ContextKeepError"):
        assert name in contextkeep.__all__
    assert issubclass(contextkeep.ContextOverflowError, contextkeep.ContextKeepError)
    assert issubclass(contextkeep.ConfigError, ValueError)


def test_classify_error_is_public_and_works_on_raw_http() -> None:
    body = '{"error": {"message": "prompt is too long: 210000 tokens > 200000 maximum", "type": "invalid_request_error"}}'
    overflow = contextkeep.classify_error(400, body)
    assert overflow is not None and overflow.phase is contextkeep.OverflowPhase.INPUT_CONTEXT
    assert (overflow.limit, overflow.requested) == (200_000, 210_000)
    assert (
        contextkeep.classify_error(429, "Request too large for gpt-4o on tokens per min (TPM): Limit 30000")
        is None
    )
