"""Overflow errors from OpenAI and the servers that speak its wording (DeepSeek, vLLM)."""

from __future__ import annotations

import json
from typing import Any

from contextkeep._errors import OverflowPhase
from support.overflow_bodies import IN, OUT, TOTAL, UNKNOWN, openai_body, vllm_body

# (id, status, body as it arrives, phase, limit, requested, provider detected)
OPENAI_OVERFLOWS: list[tuple[str, int | None, Any, OverflowPhase, int | None, int | None, str | None]] = [
    (
        "openai_chat_messages_resulted_in",
        400,
        openai_body(
            "This model's maximum context length is 8192 tokens. However, your messages resulted in "
            "10000 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
        ),
        IN,
        8192,
        10000,
        "openai",
    ),
    (
        "openai_legacy_messages_and_completion",
        400,
        openai_body(
            "This model's maximum context length is 4097 tokens. However, you requested 4162 tokens "
            "(3962 in the messages, 200 in the completion). Please reduce the length of the messages "
            "or completion.",
            "context_length_exceeded",
        ),
        TOTAL,
        4097,
        4162,
        "openai-compatible",
    ),
    (
        "openai_functions_from_memory",
        400,
        openai_body(
            "This model's maximum context length is 4096 tokens. However, you requested 4500 tokens "
            "(3000 in the messages, 500 in the functions, and 1000 in the completion). Please reduce "
            "the length of the messages, functions, or completion.",
            "context_length_exceeded",
        ),
        TOTAL,
        4096,
        4500,
        "openai-compatible",
    ),
    (
        "openai_responses_input_exceeds_window",
        400,
        json.dumps(
            {
                "error": {
                    "message": "Your input exceeds the context window of this model. "
                    "Please adjust your input and try again.",
                    "type": "invalid_request_error",
                    "param": "input",
                    "code": "context_length_exceeded",
                }
            }
        ),
        IN,
        None,
        None,
        "openai",
    ),
    (
        "openai_responses_failed_event",
        200,
        {
            "type": "response.failed",
            "response": {
                "error": {
                    "code": "context_length_exceeded",
                    "message": "Your input exceeds the context window of this model. "
                    "Please adjust your input and try again.",
                }
            },
        },
        IN,
        None,
        None,
        "openai",
    ),
    (
        "openai_code_only_on_500",
        500,
        '{"error":{"message":"refused","code":"context_length_exceeded"}}',
        UNKNOWN,
        None,
        None,
        None,
    ),
    (
        "openai_max_tokens_over_output_cap",
        400,
        openai_body(
            "max_tokens is too large: 128000. This model supports at most 16384 completion tokens, "
            "whereas you provided 128000."
        ),
        OUT,
        16384,
        128000,
        "openai",
    ),
    (
        "deepseek_messages_over_window",
        400,
        openai_body(
            "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens "
            "(70000 in the messages, 0 in the completion). Please reduce the length of the messages or "
            "completion.",
            "invalid_request_error",
        ),
        IN,
        65536,
        70000,
        "openai-compatible",
    ),
    (
        "deepseek_messages_plus_completion",
        400,
        openai_body(
            "This model's maximum context length is 65536 tokens. However, you requested 68000 tokens "
            "(60000 in the messages, 8000 in the completion). Please reduce the length of the messages "
            "or completion.",
            "invalid_request_error",
        ),
        TOTAL,
        65536,
        68000,
        "openai-compatible",
    ),
    (
        "vllm_old_messages_and_completion",
        400,
        vllm_body(
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
            "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages "
            "or completion."
        ),
        TOTAL,
        4096,
        5000,
        "openai-compatible",
    ),
    (
        "vllm_request_has_input_tokens",
        400,
        openai_body(
            "This model's maximum context length is 32768 tokens. However, your request has 40000 input "
            "tokens. Please reduce the length of the input messages.",
            400,
            "BadRequestError",
        ),
        IN,
        32768,
        40000,
        "vllm",
    ),
    (
        "vllm_output_plus_prompt_over_window",
        400,
        openai_body(
            "This model's maximum context length is 8192 tokens. However, you requested 900 output "
            "tokens and your prompt contains at least 7293 input tokens, for a total of at least 8193 "
            "tokens. Please reduce the length of the input prompt or the number of requested output "
            "tokens. (parameter=input_tokens, value=7293)",
            400,
            "BadRequestError",
        ),
        TOTAL,
        8192,
        8193,
        "vllm",
    ),
    (
        "vllm_prompt_alone_over_window",
        400,
        openai_body(
            "This model's maximum context length is 40960 tokens. However, you requested 0 output "
            "tokens and your prompt contains at least 40961 input tokens, for a total of at least 40961 "
            "tokens. Please reduce the length of the input prompt or the number of requested output "
            "tokens. (parameter=input_tokens, value=40961)",
            400,
            "BadRequestError",
        ),
        IN,
        40960,
        40961,
        "vllm",
    ),
    (
        "vllm_max_tokens_larger_than_window",
        400,
        openai_body(
            "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context "
            "length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",
            400,
            "BadRequestError",
        ),
        OUT,
        4096,
        8000,
        "vllm",
    ),
    (
        "vllm_max_tokens_plus_prompt_over_window",
        400,
        openai_body(
            "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum context "
            "length is 4096 tokens and your request has 2778 input tokens (2000 > 4096 - 2778). None",
            400,
            "BadRequestError",
        ),
        TOTAL,
        4096,
        4778,
        "vllm",
    ),
    (
        "vllm_offline_decoder_prompt",
        None,
        "ValueError: The decoder prompt (length 12324) is longer than the maximum model length of "
        "8192. Make sure that `max_model_len` is no smaller than the number of text tokens.",
        IN,
        8192,
        12324,
        "vllm",
    ),
    (
        "vllm_offline_traceback_text",
        500,
        'Traceback (most recent call last):\n  File "llm_engine.py", line 1, in _validate\n'
        "ValueError: The prompt (length 9000) is longer than the maximum model length of 8192.\n",
        IN,
        8192,
        9000,
        "vllm",
    ),
    (
        "vllm_input_longer_than_max_model_length",
        400,
        '{"error":{"message":"input is longer than the maximum model length of 32768"}}',
        IN,
        32768,
        None,
        "vllm",
    ),
    (
        "vllm_detail_shape",
        422,
        {
            "detail": "This model's maximum context length is 2048 tokens. However, your request has "
            "3000 input tokens. Please reduce the length of the input messages."
        },
        IN,
        2048,
        3000,
        "vllm",
    ),
]
