"""Running agents: tools, the recall tool, and the tool-calling runner."""

from contextkeep._agent.recall import recall_tool
from contextkeep._agent.runner import Agent, Runner, Turn
from contextkeep._agent.skills import Skill
from contextkeep._agent.tools import Tool, ToolError, tool

__all__ = ["Agent", "Runner", "Skill", "Tool", "ToolError", "Turn", "recall_tool", "tool"]
