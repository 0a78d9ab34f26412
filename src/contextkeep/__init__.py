"""contextkeep: keep long-running LLM agents inside their context window without losing task state.

```python
import contextkeep as ck

cm = ck.ContextManager(ck.ModelSpec("deepseek-chat", context_window=131_072, max_output_tokens=8_192))
async with cm.session("conversation-1001") as s:
    await s.add([{"role": "system", "content": "..."}, {"role": "user", "content": "..."}])
    view = await s.prepare()  # view.messages (OpenAI format), view.status
    ...
    await s.record(reply)  # the assistant message and the provider's usage
```
"""

from contextkeep._agents_flex import AgentsFlexEvent
from contextkeep.agent import Agent, Runner, Skill, Tool, ToolError, Turn, tool
from contextkeep.baseline import UsageState, UsageStatus
from contextkeep.budget import Budget, ContextState, Thresholds
from contextkeep.capabilities import CapacitySource, ModelSpec, resolve_model_spec
from contextkeep.compaction import CompactionRecord, CompactionState, Summary
from contextkeep.config import ContextConfig, load_config
from contextkeep.errors import (
    CompactionError,
    ConfigError,
    ContextKeepError,
    ContextOverflowError,
    MalformedHistoryError,
    MaxIterationsError,
    MessageFormatError,
    ModelError,
    OverflowPhase,
    SchemaVersionError,
    StoreError,
    SummaryError,
    TokenizerError,
    UnsafePathError,
    WorkspaceError,
)
from contextkeep.events import ContextStatus, Event, EventBus
from contextkeep.manager import NOT_GIVEN, ContextManager, SyncSession
from contextkeep.messages import FilePart, ImagePart, Message, TextPart, ToolCall
from contextkeep.models import ModelAdapter, ModelReply, classify_error, classify_exception
from contextkeep.offload import LocalWorkspace, Offloader, Workspace
from contextkeep.rounds import RepairPolicy, Round, split_rounds
from contextkeep.session import Session
from contextkeep.stores import Store, open_store
from contextkeep.summarizers import Summarizer
from contextkeep.tokens import CountSource, TokenCounter, counter_for_model
from contextkeep.usage import Usage, UsageSource
from contextkeep.view import View

__all__ = [
    "NOT_GIVEN",
    "Agent",
    "AgentsFlexEvent",
    "Budget",
    "CapacitySource",
    "CompactionError",
    "CompactionRecord",
    "CompactionState",
    "ConfigError",
    "ContextConfig",
    "ContextKeepError",
    "ContextManager",
    "ContextOverflowError",
    "ContextState",
    "ContextStatus",
    "CountSource",
    "Event",
    "EventBus",
    "FilePart",
    "ImagePart",
    "LocalWorkspace",
    "MalformedHistoryError",
    "MaxIterationsError",
    "Message",
    "MessageFormatError",
    "ModelAdapter",
    "ModelError",
    "ModelReply",
    "ModelSpec",
    "Offloader",
    "OverflowPhase",
    "RepairPolicy",
    "Round",
    "Runner",
    "SchemaVersionError",
    "Session",
    "Skill",
    "Store",
    "StoreError",
    "Summarizer",
    "Summary",
    "SummaryError",
    "SyncSession",
    "TextPart",
    "Thresholds",
    "TokenCounter",
    "TokenizerError",
    "Tool",
    "ToolCall",
    "ToolError",
    "Turn",
    "UnsafePathError",
    "Usage",
    "UsageSource",
    "UsageState",
    "UsageStatus",
    "View",
    "Workspace",
    "WorkspaceError",
    "classify_error",
    "classify_exception",
    "counter_for_model",
    "load_config",
    "open_store",
    "resolve_model_spec",
    "split_rounds",
    "tool",
]
