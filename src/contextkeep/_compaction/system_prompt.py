"""The system prompt a view shows: the transcript's system message through the `on_system_prompt` hooks.

Hooks (AgentScope's middleware, DB-GPT's task progress) inject dynamic context without
editing the stored prompt. They may be async, while views are built synchronously (and many
times in one compaction pass): the async shell awaits :meth:`SystemPrompt.resolve` before
building, and the builder reads the resolved text, so it stays a pure, cached function. The
resolved text only changes when a hook's answer changes, which keeps the prompt-cache prefix.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence

from contextkeep._compaction.render import progress_section
from contextkeep._compaction.state import ProgressStep
from contextkeep._errors import ConfigError

__all__ = ["SystemPrompt", "SystemPromptHook", "default_progress_hook"]

SystemPromptHook = Callable[[str, Sequence[ProgressStep]], str | Awaitable[str]]
"""An `on_system_prompt` hook: (the system text so far, the task progress shown) → the new text.

Sync or async; hooks run in order, each on the previous one's text.
"""

_Key = tuple[str, tuple[ProgressStep, ...]]


def default_progress_hook(system: str, steps: Sequence[ProgressStep]) -> str:
    """DB-GPT's task progress: completed steps and their snapshot references."""
    return system + progress_section(steps) if steps else system


class SystemPrompt:
    """Runs the hooks on a conversation's system message, resolved ahead for the synchronous builder."""

    def __init__(self, hooks: Sequence[SystemPromptHook]) -> None:
        self.hooks = tuple(hooks)
        """The hooks, in the order they run."""
        self._resolved: dict[_Key, str] = {}

    async def resolve(self, base: str, progress: tuple[ProgressStep, ...], shown: int) -> None:
        """Run the hooks (awaiting async ones) for the progress a view shows now and after a compaction.

        A compaction pass shows every step (`progress`); until then the first `shown` are shown.
        The results replace the previous ones: hooks answer anew before each call.
        """
        resolved: dict[_Key, str] = {}
        for steps in dict.fromkeys((progress[:shown], progress)):
            text = base
            for hook in self.hooks:
                result = hook(text, steps)
                text = result if isinstance(result, str) else await result
            resolved[(base, steps)] = text
        self._resolved = resolved

    def text(self, base: str, steps: tuple[ProgressStep, ...]) -> str:
        """The system text for `base` showing `steps`: as resolved, else through the hooks now (sync only)."""
        found = self._resolved.get((base, steps))
        if found is not None:
            return found
        text = base
        for hook in self.hooks:
            result = hook(text, steps)
            if not isinstance(result, str):
                if inspect.iscoroutine(result):
                    result.close()  # never awaited: close it rather than leave a warning behind
                raise ConfigError(
                    "hooks",
                    f"on_system_prompt hook {getattr(hook, '__qualname__', hook)!r} is async and was not "
                    "resolved for this view: await `resolve` before building (sessions do it when they load)",
                )
            text = result
        return text
