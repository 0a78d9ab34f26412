"""Compaction: the persisted state, and the layers that change it, as pluggable objects.

A layer implements :class:`Layer` (decide, then propose new states through the
:class:`PassContext`); :func:`register_layer` makes it available by name to
`ContextConfig.layers`, beside the built-in `L1`–`L4` (:class:`LayerName`).
"""

from contextkeep._compaction._layer import Layer
from contextkeep._compaction._names import CompressionReason, LayerName
from contextkeep._compaction._pass import Outcome, PassContext, PassResources
from contextkeep._compaction._registry import LayerFactory, register_layer, resolve_layers
from contextkeep._compaction.state import CompactionRecord, CompactionState, ProgressStep, Summary
from contextkeep._compaction.system_prompt import SystemPromptHook, default_progress_hook

__all__ = [
    "CompactionRecord",
    "CompactionState",
    "CompressionReason",
    "Layer",
    "LayerFactory",
    "LayerName",
    "Outcome",
    "PassContext",
    "PassResources",
    "ProgressStep",
    "Summary",
    "SystemPromptHook",
    "default_progress_hook",
    "register_layer",
    "resolve_layers",
]
