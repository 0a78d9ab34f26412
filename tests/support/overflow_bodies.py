"""Overflow error bodies shaped as each provider sends them, and short names for the phases."""

from __future__ import annotations

import json
from typing import Any

from contextkeep._errors import OverflowPhase

IN = OverflowPhase.INPUT_CONTEXT
TOTAL = OverflowPhase.TOTAL_CONTEXT
OUT = OverflowPhase.OUTPUT
UNKNOWN = OverflowPhase.UNKNOWN


def openai_body(message: str, code: Any = None, type_: str = "invalid_request_error") -> str:
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})


def anthropic_body(message: str, type_: str = "invalid_request_error") -> str:
    return json.dumps({"type": "error", "error": {"type": type_, "message": message}})


def vllm_body(message: str) -> str:
    return json.dumps({"object": "error", "message": message, "type": "BadRequestError", "code": 400})
