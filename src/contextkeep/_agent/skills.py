"""Agent skills (AgentScope): folders of instructions whose name and description join the system prompt.

A skill is a directory holding a ``SKILL.md`` whose front matter gives its ``name`` and
``description``. Only those two lines (and where to read the rest) are shown up front; the
agent reads ``SKILL.md`` itself when a task needs the skill. The system prompt of each call is
the agent's own, then the skill instructions, then the `on_system_prompt` hooks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contextkeep._compaction.state import ProgressStep
from contextkeep._compaction.system_prompt import SystemPromptHook
from contextkeep._errors import ConfigError

__all__ = ["SKILLS_HEADER", "Skill", "skill_instructions", "skills_hook"]

SKILLS_HEADER = (
    "# Agent skills\n"
    "Each skill below is a folder of instructions, scripts and resources for one kind of task. "
    "Before using a skill, read its SKILL.md: it says how."
)
"""The note opening the skill instructions."""


@dataclass(frozen=True)
class Skill:
    """A skill the agent may use."""

    name: str
    """Its name."""
    description: str
    """What it is for (shown to the model in every call)."""
    directory: str | None = None
    """The folder holding its ``SKILL.md`` (None: the description is all there is)."""

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Skill:
        """Read ``name`` and ``description`` from the front matter of ``path/SKILL.md``."""
        skill_md = Path(path) / "SKILL.md"
        try:
            text = skill_md.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("skills", f"cannot read {skill_md}: {exc}") from exc
        fields = _front_matter(text)
        name, description = fields.get("name"), fields.get("description")
        if not name or not description:
            raise ConfigError("skills", f"{skill_md} needs `name` and `description` in its front matter")
        return cls(name, description, str(path))

    def instruction(self) -> str:
        """Its entry in the system prompt: name, description and where its instructions are."""
        where = f'\nRead "{self.directory}/SKILL.md" for how to use it.' if self.directory else ""
        return f"## {self.name}\n{self.description}{where}"


def skill_instructions(skills: Sequence[Skill]) -> str | None:
    """The skill instructions of the system prompt; None without skills."""
    if not skills:
        return None
    return "\n".join([SKILLS_HEADER, *(s.instruction() for s in skills)])


def skills_hook(skills: Sequence[Skill]) -> SystemPromptHook:
    """An `on_system_prompt` hook appending the skill instructions (the first hook, as in AgentScope)."""
    instructions = skill_instructions(skills)

    def add_skills(system: str, steps: Sequence[ProgressStep]) -> str:
        return "\n\n".join(part for part in (system, instructions) if part)

    return add_skills


def _front_matter(text: str) -> dict[str, str]:
    """`key: value` lines between the leading ``---`` fences (quotes around a value removed)."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            fields[key.strip()] = value.strip().strip("\"'")
    return fields
