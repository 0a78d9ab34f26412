"""A fake LLM server for tests: real HTTP, real token counts, providers' real error formats.

```python
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec

with FakeLLMServer(context_window=4096, replies=[Reply(tool_calls=[ToolCallSpec("ls", {})])]) as srv:
    client = openai.OpenAI(base_url=srv.base_url, api_key="test")
```
"""

from contextkeep.testing._errors import OverflowFormat
from contextkeep.testing._replies import Reply, Responder, ToolCallSpec, UsageMode, default_responder
from contextkeep.testing._server import Counter, FakeLLMServer, RecordedRequest
from contextkeep.testing._summary import (
    DEFAULT_SUMMARY_MARKER,
    SUMMARY_FIELDS,
    SummaryFailure,
    SummaryResponder,
    is_summary_request,
    summary_reply,
)
from contextkeep.testing._tokens import default_counter

__all__ = [
    "DEFAULT_SUMMARY_MARKER",
    "SUMMARY_FIELDS",
    "Counter",
    "FakeLLMServer",
    "OverflowFormat",
    "RecordedRequest",
    "Reply",
    "Responder",
    "SummaryFailure",
    "SummaryResponder",
    "ToolCallSpec",
    "UsageMode",
    "default_counter",
    "default_responder",
    "is_summary_request",
    "summary_reply",
]
