"""Every error contextkeep raises derives from :class:`ContextKeepError`.

```
ContextKeepError
├── ConfigError                 a setting is invalid (names the key)
├── MessageFormatError          input that is not a valid message in the named format
├── InvalidIdError              an id (conversation, message, tool call) too long or with control characters
├── MalformedHistoryError       breaks round pairing (orphan result, missing result, duplicate id)
├── HistoryDivergedError        a whole history handed to `Session.sync` does not continue the transcript
├── TokenizerError              a token counter could not be built or loaded
├── WorkspaceError              offload storage failed
│   └── UnsafePathError         an id or reference would escape the workspace root
├── StoreError                  a state store failed
│   └── SchemaVersionError      the store's schema is older or newer than this code
├── CompactionError             compaction could not bring the view under budget
│   └── SummaryError            a summariser failed (empty, invalid or unparsable summary)
└── ModelError                  a model call failed
    ├── ContextOverflowError    the provider said the context is too long (phase, limit, requested)
    └── MaxIterationsError      an agent turn exceeded its iteration limit
```
"""

from __future__ import annotations

import enum

__all__ = [
    "CompactionError",
    "ConfigError",
    "ContextKeepError",
    "ContextOverflowError",
    "HistoryDivergedError",
    "InvalidIdError",
    "MalformedHistoryError",
    "MaxIterationsError",
    "MessageFormatError",
    "ModelError",
    "OverflowPhase",
    "SchemaVersionError",
    "StoreError",
    "SummaryError",
    "TokenizerError",
    "UnsafePathError",
    "WorkspaceError",
]


class ContextKeepError(Exception):
    """Root of every error raised by contextkeep."""


class ConfigError(ContextKeepError, ValueError):
    """A setting is invalid. `key` names the setting."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")


class MessageFormatError(ContextKeepError, ValueError):
    """Input is not a valid message in the named format."""

    def __init__(self, fmt: str, problem: str, *, index: int | None = None) -> None:
        self.format = fmt
        self.problem = problem
        self.index = index
        where = f" (message {index})" if index is not None else ""
        super().__init__(f"invalid {fmt} message{where}: {problem}")


class InvalidIdError(ContextKeepError, ValueError):
    """An id cannot be used: empty, too long, or holding control characters or invalid Unicode.

    `what` names the id (`conversation_id`, `id`, `tool_call_id`, `tool_calls.id`); `index` is the
    position of the message that carries it, when there is one.
    """

    def __init__(self, what: str, problem: str, *, value: str = "", index: int | None = None) -> None:
        self.what = what
        self.problem = problem
        self.index = index
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        where = f" (message {index})" if index is not None else ""
        super().__init__(f"{what} {shown!r}{where} {problem}")


class MalformedHistoryError(ContextKeepError, ValueError):
    """A history breaks round pairing.

    `index` is the position of the offending message and `message_id` its id;
    `kind` is one of `orphan_result`, `missing_result`, `duplicate_id`.
    """

    def __init__(self, kind: str, index: int, message_id: str, detail: str) -> None:
        self.kind = kind
        self.index = index
        self.message_id = message_id
        self.detail = detail
        super().__init__(f"{kind} at message {index} (id {message_id!r}): {detail}")


class HistoryDivergedError(ContextKeepError, ValueError):
    """A history handed to `Session.sync` does not continue the stored transcript (edited or forked)."""

    def __init__(self, conversation_id: str, index: int, detail: str) -> None:
        self.conversation_id = conversation_id
        """The conversation whose transcript the history should have continued."""
        self.index = index
        """Position in the history of the first message that differs from the transcript."""
        super().__init__(
            f"the history does not continue conversation {conversation_id!r}: message {index} {detail} "
            "(pass fork=True to continue it in a transcript of its own)"
        )


class TokenizerError(ContextKeepError):
    """A token counter could not be built or loaded."""


class WorkspaceError(ContextKeepError):
    """Offload storage failed."""


class UnsafePathError(WorkspaceError, ValueError):
    """An id or reference would escape the workspace root, or a reference its conversation's folder."""


class StoreError(ContextKeepError):
    """A state store failed."""


class SchemaVersionError(StoreError):
    """The store's schema version differs from the one this code needs."""


class CompactionError(ContextKeepError):
    """Compaction could not bring the view under its budget."""


class SummaryError(CompactionError):
    """A summariser failed: no answer, an empty answer, or one that does not validate."""


class ModelError(ContextKeepError):
    """A model call failed."""


class OverflowPhase(enum.StrEnum):
    """Which limit a context overflow broke."""

    INPUT_CONTEXT = "INPUT_CONTEXT"
    """The prompt alone is longer than the model accepts."""
    TOTAL_CONTEXT = "TOTAL_CONTEXT"
    """Prompt plus requested output exceed the context window."""
    OUTPUT = "OUTPUT"
    """The requested output is longer than the model allows; compacting history does not help."""
    UNKNOWN = "UNKNOWN"
    """A length error whose phase could not be determined; never recovered by guessing."""


class ContextOverflowError(ModelError):
    """The provider rejected (or silently truncated) a request for being too long."""

    def __init__(
        self,
        message: str,
        *,
        phase: OverflowPhase = OverflowPhase.UNKNOWN,
        limit: int | None = None,
        requested: int | None = None,
        provider: str | None = None,
        status_code: int | None = None,
        requested_output: int | None = None,
    ) -> None:
        self.phase = phase
        self.limit = limit
        self.requested = requested
        self.provider = provider
        self.status_code = status_code
        self.requested_output = requested_output
        """The reply size the request reserved (its `max_tokens`), when the provider states it."""
        super().__init__(message)

    @property
    def gap(self) -> int | None:
        """Tokens over the limit, when both figures are known."""
        if self.limit is None or self.requested is None:
            return None
        return max(0, self.requested - self.limit)

    @property
    def recoverable(self) -> bool:
        """Whether compacting the history can fix it (input or total context)."""
        return self.phase in (OverflowPhase.INPUT_CONTEXT, OverflowPhase.TOTAL_CONTEXT)


class MaxIterationsError(ModelError):
    """An agent turn made more model calls than its limit allows."""
