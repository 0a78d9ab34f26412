"""Running agents: tools, the recall tool, and the tool-calling runner."""

from contextkeep.agent.recall import recall_tool
from contextkeep.agent.runner import Agent, Runner, Turn
from contextkeep.agent.skills import Skill
from contextkeep.agent.tools import Tool, ToolError, tool

__all__ = ["Agent", "Runner", "Skill", "Tool", "ToolError", "Turn", "recall_tool", "tool"]
