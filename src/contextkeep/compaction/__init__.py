"""The compaction engine: state, view derivation, layers and the progressive pipeline."""

from contextkeep.compaction.builder import REF_KEY, SystemPromptHook, ViewBuilder, default_progress_hook
from contextkeep.compaction.pipeline import Compactor, Outcome
from contextkeep.compaction.state import CompactionRecord, CompactionState, ProgressStep, Summary

__all__ = [
    "REF_KEY",
    "CompactionRecord",
    "CompactionState",
    "Compactor",
    "Outcome",
    "ProgressStep",
    "Summary",
    "SystemPromptHook",
    "ViewBuilder",
    "default_progress_hook",
]
