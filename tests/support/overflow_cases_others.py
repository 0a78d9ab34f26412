"""Overflow errors from Anthropic and the other hosted and self-hosted providers."""

from __future__ import annotations

from typing import Any

from contextkeep._errors import OverflowPhase
from support.overflow_bodies import IN, OUT, TOTAL, UNKNOWN, anthropic_body, openai_body

# (id, status, body as it arrives, phase, limit, requested, provider detected)
OTHER_OVERFLOWS: list[tuple[str, int | None, Any, OverflowPhase, int | None, int | None, str | None]] = [
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
