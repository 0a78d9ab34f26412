"""ADK contents, instructions and tools converted to contextkeep messages as a chat model gets them."""

from __future__ import annotations

from google.genai import types

from contextkeep.integrations._adk_contents import instructions_of, tools_of
from contextkeep.integrations.adk import to_messages


def test_contents_convert_as_adk_sends_them_to_a_chat_model() -> None:
    model = types.Content(
        role="model",
        parts=[
            types.Part(text="Let me think.", thought=True),
            types.Part(text="Running it."),
            types.Part(function_call=types.FunctionCall(id="adk-1", name="run", args={"code": "print(1)"})),
            types.Part(function_call=types.FunctionCall(id="toolu_7", name="look", args={})),
        ],
    )
    results = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(id="adk-1", name="run", response={"result": "1"})
            ),
            types.Part(
                function_response=types.FunctionResponse(id="toolu_7", name="look", response={"seen": [1, 2]})
            ),
            types.Part(
                file_data=types.FileData(file_uri="gs://bucket/report.pdf", mime_type="application/pdf")
            ),
            types.Part(executable_code=types.ExecutableCode(code="print(2)", language=types.Language.PYTHON)),
        ],
    )
    reply, first, second, rest = to_messages([model, results])
    assert (reply.reasoning, reply.text) == ("Let me think.", "Running it.")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("run", '{"code": "print(1)"}'),
        ("look", "{}"),
    ]
    assert (
        reply.tool_calls[0].id.startswith("call_ck") and reply.tool_calls[1].id == "toolu_7"
    )  # ADK's own ids: none
    assert (first.tool_call_id, first.text) == (reply.tool_calls[0].id, "1")
    assert (second.tool_call_id, second.text) == ("toolu_7", '{"seen": [1, 2]}')
    assert (
        rest.role == "user"
        and rest.text == "print(2)"
        and [p.url for p in rest.media] == ["gs://bucket/report.pdf"]
    )


def test_instructions_and_tools_count_as_sent() -> None:
    config = types.GenerateContentConfig(
        system_instruction=types.Content(
            parts=[types.Part(text="Be brief."), types.Part(text="Cite files.")]
        ),
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name="grep",
                        description="Search the tree.",
                        parameters=types.Schema(
                            type=types.Type.OBJECT,
                            properties={"pattern": types.Schema(type=types.Type.STRING)},
                        ),
                    ),
                    types.FunctionDeclaration(name="pwd"),
                ]
            ),
            types.Tool(google_search=types.GoogleSearch()),  # a built-in tool: sent as it is, not counted
        ],
    )
    assert instructions_of(config) == "Be brief.\nCite files."
    assert instructions_of(types.GenerateContentConfig(system_instruction="Be brief.")) == "Be brief."
    grep, pwd = tools_of(config) or []
    assert grep["function"]["parameters"]["properties"]["pattern"]["type"] == "string"
    assert pwd["function"] == {
        "name": "pwd",
        "description": "",
        "parameters": {"type": "object", "properties": {}},
    }
