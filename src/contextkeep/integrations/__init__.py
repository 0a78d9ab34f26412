"""Framework integrations, each behind its own extra; import the submodule of your framework.

- `contextkeep.integrations.langchain` (`pip install 'contextkeep[langchain]'`)
- `contextkeep.integrations.pydantic_ai` (`pip install 'contextkeep[pydantic-ai]'`)
- `contextkeep.integrations.openai_agents` (`pip install 'contextkeep[openai-agents]'`)
- `contextkeep.integrations.adk` (`pip install 'contextkeep[adk]'`)

Each is view-only: the framework's own history stays whole; contextkeep's transcript follows it
through `Session.sync`, and only the request the model receives is compacted.
"""

__all__: list[str] = []
