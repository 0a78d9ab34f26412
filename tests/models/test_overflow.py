"""Provider errors as they arrive → overflow phase, limit, requested and provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextkeep._errors import ContextOverflowError, OverflowPhase
from contextkeep.models.overflow import check_silent_truncation, classify_error, classify_exception

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


# (id, status, body as it arrives, phase, limit, requested, provider detected)
OVERFLOWS: list[tuple[str, int | None, Any, OverflowPhase, int | None, int | None, str | None]] = [
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
    (
        "anthropic_prompt_too_long",
        400,
        anthropic_body("prompt is too long: 210000 tokens > 200000 maximum"),
        IN,
        200000,
        210000,
        "anthropic",
    ),
    (
        "anthropic_input_and_max_tokens_backticks",
        400,
        anthropic_body(
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease "
            "input length or `max_tokens` and try again"
        ),
        TOTAL,
        200000,
        209573,
        "anthropic",
    ),
    (
        "anthropic_input_and_max_tokens",
        400,
        anthropic_body(
            "input length and max_tokens exceed context limit: 190000 + 20000 > 200000, decrease "
            "input length or max_tokens and try again"
        ),
        TOTAL,
        200000,
        210000,
        "anthropic",
    ),
    (
        "anthropic_output_cap",
        400,
        anthropic_body(
            "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for "
            "claude-sonnet-4-20250514"
        ),
        OUT,
        64000,
        100000,
        "anthropic",
    ),
    (
        "anthropic_relayed_by_litellm_proxy",
        400,
        openai_body(
            '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: '
            '250000 tokens > 200000 maximum"},"request_id":"req_1"}. Received Model Group=claude',
            "400",
            "None",
        ),
        IN,
        200000,
        250000,
        "anthropic",
    ),
    (
        "gemini",
        400,
        '{"error":{"code":400,"message":"The input token count (1100000) exceeds the maximum number '
        'of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}',
        IN,
        1048576,
        1100000,
        "gemini",
    ),
    (
        "gemini_list_body",
        400,
        '[{"error":{"code":400,"message":"The input token count (1100000) exceeds the maximum number '
        'of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]',
        IN,
        1048576,
        1100000,
        "gemini",
    ),
    (
        "mistral",
        400,
        '{"object":"error","message":"Prompt contains 40000 tokens and 0 draft tokens, too large for '
        'model with 32768 maximum context length","type":"invalid_request_error"}',
        IN,
        32768,
        40000,
        "mistral",
    ),
    (
        "dashscope",
        400,
        '{"code":"InvalidParameter","message":"<400> InternalError.Algo.InvalidParameter: Range of '
        'input length should be [1, 30720]","request_id":"bd41"}',
        IN,
        30720,
        None,
        "dashscope",
    ),
    (
        "dashscope_max_tokens_documented",
        400,
        '{"code":"InvalidParameter","message":"<400> InternalError.Algo.InvalidParameter: Range of '
        'max_tokens should be [1, 8192]","request_id":"bd42"}',
        OUT,
        8192,
        None,
        "dashscope",
    ),
    (
        "dashscope_behind_openrouter_metadata_raw",
        400,
        {
            "error": {
                "message": "Provider returned error",
                "code": 400,
                "metadata": {
                    "raw": '{"error":{"code":"invalid_parameter_error","param":null,"message":"<400> '
                    "InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]"
                    '","type":"invalid_request_error"}}',
                    "provider_name": "Alibaba",
                },
            }
        },
        IN,
        129024,
        None,
        "dashscope",
    ),
    (
        "openrouter_text_input_over_window",
        400,
        '{"error":{"message":"This endpoint\'s maximum context length is 8192 tokens. However, you '
        "requested about 12000 tokens (10000 of text input, 2000 in the output). Please reduce the "
        'length of either one, or use the \\"middle-out\\" transform to compress your prompt '
        'automatically.","code":400}}',
        IN,
        8192,
        10000,
        "openrouter",
    ),
    (
        "openrouter_input_plus_output",
        400,
        '{"error":{"message":"This endpoint\'s maximum context length is 32768 tokens. However, you '
        'requested about 37623 tokens (21239 of text input, 16384 in the output).","code":400}}',
        TOTAL,
        32768,
        37623,
        "openrouter",
    ),
    (
        "tgi_inputs_plus_max_new_tokens",
        422,
        '{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: '
        '4000 `inputs` tokens and 500 `max_new_tokens`","error_type":"validation"}',
        TOTAL,
        4096,
        4500,
        "tgi",
    ),
    (
        "together_tgi_wording",
        400,
        '{"message": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 32769. '
        'Given: 364 `inputs` tokens and 32768 `max_new_tokens`", "type_": "invalid_request_error"}',
        TOTAL,
        32769,
        33132,
        "tgi",
    ),
    (
        "tgi_inputs_alone",
        422,
        '{"error":"Input validation error: `inputs` must have less than 4096 tokens. Given: 5000",'
        '"error_type":"validation"}',
        IN,
        4096,
        5000,
        "tgi",
    ),
    (
        "tgi_max_new_tokens",
        422,
        '{"error":"Input validation error: `max_new_tokens` must be <= 4096. Given: 20000",'
        '"error_type":"validation"}',
        OUT,
        4096,
        20000,
        "tgi",
    ),
    (
        "llama_cpp_counts_in_fields",
        400,
        '{"error":{"code":400,"message":"the request exceeds the available context size, try '
        'increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}',
        IN,
        4096,
        5000,
        "llama.cpp",
    ),
    (
        "llama_cpp_counts_in_message",
        400,
        '{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size '
        '(4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4476,'
        '"n_ctx":4096}}',
        IN,
        4096,
        4476,
        "llama.cpp",
    ),
    (
        "llama_cpp_counts_in_python_repr",
        400,
        "Error code: 400 - {'error': {'code': 400, 'message': 'the request exceeds the available "
        "context size, try increasing it', 'type': 'exceed_context_size_error', "
        "'n_prompt_tokens': 6000, 'n_ctx': 4096}}",
        IN,
        4096,
        6000,
        "llama.cpp",
    ),
    (
        "llama_cpp_older_server_input_larger",
        400,
        '{"error":{"code":400,"message":"input (5000 tokens) is larger than the max context size '
        '(4096 tokens). skipping","type":"exceed_context_size_error"}}',
        IN,
        4096,
        5000,
        "llama.cpp",
    ),
    (
        "llama_cpp_older_wording",
        400,
        '{"error":{"code":400,"message":"the request exceeds the available context size. try '
        'increasing the context size or enable context shift","type":"invalid_request_error"}}',
        IN,
        None,
        None,
        "llama.cpp",
    ),
    (
        "ollama_prompt_too_long",
        400,
        '{"error":"prompt too long; exceeded max context length by 4 tokens"}',
        IN,
        None,
        None,
        "ollama",
    ),
    (
        "ollama_embed_input_length",
        500,
        '{"error":"the input length exceeds the context length"}',
        IN,
        None,
        None,
        "ollama",
    ),
    (
        "xai",
        400,
        '{"code":"Client specified an invalid argument","error":"This model\'s maximum prompt length '
        'is 131072 but the request contains 150000 tokens."}',
        IN,
        131072,
        150000,
        "xai",
    ),
    (
        "together_input_longer_than_context",
        400,
        openai_body("The input (516368 tokens) is longer than the model's context length (262144 tokens)."),
        IN,
        262144,
        516368,
        "together",
    ),
    (
        "moonshot_limit_only",
        400,
        openai_body("Invalid request: Your request exceeded model token limit: 8192"),
        UNKNOWN,
        8192,
        None,
        "moonshot",
    ),
    (
        "moonshot_with_requested",
        400,
        openai_body("Your request exceeded model token limit: 262144 (requested: 300000)"),
        UNKNOWN,
        262144,
        300000,
        "moonshot",
    ),
    (
        "cerebras_litellm_pattern",
        400,
        openai_body(
            "Please reduce the length of the messages or completion. Current length is 9000 while "
            "limit is 8192"
        ),
        UNKNOWN,
        8192,
        9000,
        "cerebras",
    ),
    (
        "bedrock_message_shape",
        400,
        {"message": "Input is too long for requested model."},
        IN,
        None,
        None,
        "bedrock",
    ),
    (
        "litellm_proxy_class_name",
        400,
        '{"error":{"message":"litellm.ContextWindowExceededError: litellm.BadRequestError: '
        'Hosted_vllmException - Input length 9000 exceeds model limit","type":null,"param":null,'
        '"code":"400"}}',
        UNKNOWN,
        None,
        None,
        "litellm",
    ),
    (
        "litellm_wrapping_vllm_text",
        400,
        "litellm.ContextWindowExceededError: OpenAIException - Error code: 400 - {'error': "
        "{'message': \"This model's maximum context length is 32768 tokens. However, your request "
        'has 59360 input tokens. Please reduce the length of the input messages."}}',
        IN,
        32768,
        59360,
        "vllm",
    ),
    (
        "zai_code_in_text",
        400,
        "model_context_window_exceeded",
        UNKNOWN,
        None,
        None,
        None,
    ),
    (
        "generic_maximum_context_length",
        400,
        "This model's maximum context length is 128000 tokens.",
        UNKNOWN,
        128000,
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("status", "body", "phase", "limit", "requested", "provider"),
    [pytest.param(*case[1:], id=case[0]) for case in OVERFLOWS],
)
def test_overflow_is_classified(status, body, phase, limit, requested, provider):
    err = classify_error(status, body)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (phase, limit, requested, provider)
    assert err.status_code == status
    assert str(err)


NOT_OVERFLOWS: list[tuple[str, int | None, Any]] = [
    (
        "openai_tpm_rate_limit",
        429,
        openai_body(
            "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
            "Used 29000, Requested 5000. Please try again in 2s.",
            "rate_limit_exceeded",
            "tokens",
        ),
    ),
    (
        "openai_request_too_large_tpm_without_status",
        None,
        openai_body(
            "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
            "Requested 45000. The input or output tokens must be reduced in order to run successfully.",
            "rate_limit_exceeded",
            "tokens",
        ),
    ),
    (
        "groq_tpm_on_413",
        413,
        openai_body(
            "Request too large for model `llama3-70b-8192` in organization `org_x` service tier "
            "`on_demand` on tokens per minute (TPM): Limit 6000, Requested 9000, please reduce your "
            "message size and try again.",
            "rate_limit_exceeded",
            "tokens",
        ),
    ),
    (
        "status_429_vetoes_length_wording",
        429,
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "10000 tokens.",
    ),
    (
        "anthropic_rate_limit",
        429,
        anthropic_body(
            "This request would exceed the rate limit for your organization of 40,000 input tokens "
            "per minute.",
            "rate_limit_error",
        ),
    ),
    (
        "anthropic_413_bytes",
        413,
        anthropic_body("Request exceeds the maximum allowed number of bytes.", "request_too_large"),
    ),
    (
        "anthropic_image_too_large",
        400,
        anthropic_body(
            "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: 6291456 bytes > "
            "5242880 bytes"
        ),
    ),
    ("anthropic_overloaded", 529, anthropic_body("Overloaded", "overloaded_error")),
    ("nginx_413", 413, "<html><head><title>413 Request Entity Too Large</title></head></html>"),
    (
        "openai_invalid_tool_schema",
        400,
        openai_body(
            "Invalid schema for function 'read': In context=('properties', 'path'), schema must have "
            "a 'type' key.",
            "invalid_function_parameters",
        ),
    ),
    (
        "openai_tool_message_without_call",
        400,
        openai_body(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
            "with 'tool_calls'."
        ),
    ),
    (
        "openai_string_above_max_length",
        400,
        openai_body(
            "Invalid 'messages[3].content': string too long. Expected a string with maximum length "
            "1048576, but got a string with length 2097152 instead.",
            "string_above_max_length",
        ),
    ),
    (
        "openai_wrong_key",
        401,
        openai_body("Incorrect API key provided: sk-abc***def.", "invalid_api_key"),
    ),
    (
        "openai_unknown_model",
        404,
        openai_body("The model `gpt-9` does not exist or you do not have access to it.", "model_not_found"),
    ),
    (
        "server_error_naming_the_window",
        500,
        openai_body(
            "failed to load the model: the maximum context length is not available", None, "server_error"
        ),
    ),
    (
        "pydantic_422_echoing_the_prompt",
        422,
        {
            "detail": [
                {
                    "type": "string_too_long",
                    "loc": ["body", "messages", 0, "content"],
                    "msg": "String should have at most 100 characters",
                    "input": "Why does my agent fail with: This model's maximum context length is 8192 "
                    "tokens. However, your messages resulted in 10000 tokens.",
                }
            ]
        },
    ),
    ("empty_400", 400, ""),
    ("no_body", 400, None),
]


@pytest.mark.parametrize(("status", "body"), [pytest.param(*case[1:], id=case[0]) for case in NOT_OVERFLOWS])
def test_other_errors_are_not_overflows(status, body):
    assert classify_error(status, body) is None


ANTHROPIC_DICT = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(ANTHROPIC_DICT, id="dict"),
        pytest.param(json.dumps(ANTHROPIC_DICT), id="json_text"),
        pytest.param(json.dumps(json.dumps(ANTHROPIC_DICT)), id="json_encoded_twice"),
        pytest.param("  " + json.dumps(ANTHROPIC_DICT, indent=2) + "\n", id="pretty_json_text"),
        pytest.param("prompt is too long: 210000 tokens > 200000 maximum", id="plain_text"),
    ],
)
def test_body_shapes_give_the_same_answer(body):
    err = classify_error(400, body)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (IN, 200000, 210000, "anthropic")
    assert str(err) == "prompt is too long: 210000 tokens > 200000 maximum"
    assert (err.gap, err.recoverable) == (10000, True)


def test_message_is_the_line_that_matched():
    body = (
        'Traceback (most recent call last):\n  File "llm_engine.py", line 1, in _validate\n'
        "ValueError: The prompt (length 9000) is longer than the maximum model length of 8192.\n"
    )

    err = classify_error(500, body)

    assert err is not None
    assert str(err) == "ValueError: The prompt (length 9000) is longer than the maximum model length of 8192."


def test_given_provider_overrides_the_detected_one():
    body = openai_body(
        "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens "
        "(70000 in the messages, 0 in the completion)."
    )

    err = classify_error(400, body, provider="deepseek")

    assert err is not None
    assert err.provider == "deepseek"


def test_output_overflow_is_not_recoverable():
    err = classify_error(
        400,
        anthropic_body("max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens"),
    )

    assert err is not None
    assert (err.recoverable, err.gap) == (False, 36000)


# --- classify_exception: fakes mimic the SDK attributes we read (the boundary we do not own) ---


class FakeResponse:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class FakeAPIStatusError(Exception):
    def __init__(self, message: str, *, status_code: int, body: object | None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.response = FakeResponse(status_code)


class FakeResponseOnlyError(Exception):
    """An exception that carries its status only on `.response`."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.response = FakeResponse(status_code)


class ContextWindowExceededError(Exception):
    """Same name as litellm's class; litellm prefixes its own text to the provider's."""

    def __init__(self, message: str, llm_provider: str) -> None:
        super().__init__(message)
        self.message = message
        self.llm_provider = llm_provider
        self.status_code = 400


class ProxyContextWindowError(ContextWindowExceededError):
    pass


def test_exception_with_parsed_body():
    exc = FakeAPIStatusError(
        "Error code: 400",
        status_code=400,
        body={
            "message": "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 10000 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        },
    )

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider, err.status_code) == (
        IN,
        8192,
        10000,
        "openai",
        400,
    )
    assert err.__cause__ is exc


def test_exception_with_status_only_on_response():
    exc = FakeResponseOnlyError("prompt is too long: 210000 tokens > 200000 maximum", 400)

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.status_code, err.provider) == (IN, 400, "anthropic")


def test_litellm_exception_uses_its_provider_and_the_inner_wording():
    exc = ContextWindowExceededError(
        "AnthropicError - prompt is too long: 210000 tokens > 200000 maximum", llm_provider="vertex_ai"
    )

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (IN, 200000, 210000, "vertex_ai")
    assert err.__cause__ is exc


@pytest.mark.parametrize("cls", [ContextWindowExceededError, ProxyContextWindowError])
def test_litellm_verdict_is_kept_when_the_wording_is_unknown(cls):
    exc = cls("Hosted_vllmException - Input length 9000 exceeds model limit", llm_provider="hosted_vllm")

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (UNKNOWN, None, None, "hosted_vllm")
    assert err.__cause__ is exc


def test_overflow_error_is_returned_as_is():
    original = ContextOverflowError("too long", phase=IN, limit=10, requested=20)

    assert classify_exception(original) is original


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(ValueError("boom"), id="unrelated"),
        pytest.param(
            FakeAPIStatusError(
                "Error code: 429",
                status_code=429,
                body={"message": "Rate limit reached ... tokens per min (TPM): Limit 30000, Requested 45000"},
            ),
            id="rate_limit",
        ),
        pytest.param(
            FakeAPIStatusError("Error code: 401", status_code=401, body={"message": "invalid x-api-key"}),
            id="auth",
        ),
    ],
)
def test_exceptions_that_are_not_overflows(exc):
    assert classify_exception(exc) is None


# --- the real SDKs, fed through a mock transport so they build their own errors ---


def _http_lib() -> Any:
    """The HTTP library the installed SDKs are built on (httpx2 in recent versions)."""
    try:
        import httpx2

        return httpx2
    except ImportError:
        import httpx

        return httpx


def _answering(status: int, body: object) -> Any:
    http = _http_lib()
    return http.Client(transport=http.MockTransport(lambda request: http.Response(status, json=body)))


def test_real_openai_bad_request_error():
    openai = pytest.importorskip("openai")
    body = json.loads(
        openai_body(
            "This model's maximum context length is 8192 tokens. However, your messages resulted in "
            "10000 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
        )
    )
    client = openai.OpenAI(
        api_key="k", base_url="http://test/v1", http_client=_answering(400, body), max_retries=0
    )

    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    err = classify_exception(caught.value)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider, err.status_code) == (
        IN,
        8192,
        10000,
        "openai",
        400,
    )
    assert err.__cause__ is caught.value


def test_real_openai_rate_limit_error():
    openai = pytest.importorskip("openai")
    body = json.loads(
        openai_body(
            "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
            "Requested 45000.",
            "rate_limit_exceeded",
            "tokens",
        )
    )
    client = openai.OpenAI(
        api_key="k", base_url="http://test/v1", http_client=_answering(429, body), max_retries=0
    )

    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    assert classify_exception(caught.value) is None


def test_real_openai_error_built_by_hand():
    openai = pytest.importorskip("openai")
    http = _http_lib()
    response = http.Response(
        400,
        json={"error": {"message": "Your input exceeds the context window of this model."}},
        request=http.Request("POST", "http://test/v1/responses"),
    )
    exc = openai.BadRequestError(
        "Error code: 400",
        response=response,
        body={
            "message": "Your input exceeds the context window of this model.",
            "code": "context_length_exceeded",
        },
    )

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.provider, err.status_code) == (IN, "openai", 400)


@pytest.mark.parametrize(
    ("message", "phase", "limit", "requested"),
    [
        pytest.param("prompt is too long: 210000 tokens > 200000 maximum", IN, 200000, 210000, id="input"),
        pytest.param(
            "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000, decrease input "
            "length or `max_tokens` and try again",
            TOTAL,
            200000,
            210000,
            id="total",
        ),
        pytest.param(
            "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-x",
            OUT,
            64000,
            100000,
            id="output",
        ),
    ],
)
def test_real_anthropic_bad_request_error(message, phase, limit, requested):
    anthropic = pytest.importorskip("anthropic")
    body = json.loads(anthropic_body(message))
    client = anthropic.Anthropic(
        api_key="k", base_url="http://test", http_client=_answering(400, body), max_retries=0
    )

    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    err = classify_exception(caught.value)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider, err.status_code) == (
        phase,
        limit,
        requested,
        "anthropic",
        400,
    )


# --- Ollama's silent truncation ---


@pytest.mark.parametrize(
    ("prompt_eval_count", "local", "num_ctx", "tolerance"),
    [
        pytest.param(4096, 6000, 4096, 0.05, id="cut_to_the_window"),
        pytest.param(4000, 6000, 4096, 0.05, id="cut_just_under_the_window"),
        pytest.param(2048, 2200, 2048, 0.0, id="no_tolerance"),
    ],
)
def test_silent_truncation_is_detected(prompt_eval_count, local, num_ctx, tolerance):
    err = check_silent_truncation(prompt_eval_count, local, num_ctx, tolerance=tolerance)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (IN, num_ctx, local, "ollama")
    assert err.gap == local - num_ctx


@pytest.mark.parametrize(
    ("prompt_eval_count", "local", "num_ctx"),
    [
        pytest.param(3000, 3000, 4096, id="fits"),
        pytest.param(4090, 4200, 4096, id="local_count_within_tokenizer_drift"),
        pytest.param(500, 6000, 4096, id="cached_prefix_not_evaluated"),
        pytest.param(None, 6000, 4096, id="no_eval_count"),
        pytest.param(4096, 6000, None, id="no_num_ctx"),
        pytest.param(4096, 6000, 0, id="zero_num_ctx"),
    ],
)
def test_silent_truncation_not_reported(prompt_eval_count, local, num_ctx):
    assert check_silent_truncation(prompt_eval_count, local, num_ctx) is None


@pytest.mark.parametrize("tolerance", [-0.1, 1.0])
def test_silent_truncation_rejects_bad_tolerance(tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        check_silent_truncation(4096, 6000, 4096, tolerance=tolerance)
