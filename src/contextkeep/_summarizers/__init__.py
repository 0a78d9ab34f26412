"""Layer-3 summarisers: LLM (structured, incremental) and LLM-free extractive."""

from contextkeep._summarizers._render import render_summary
from contextkeep._summarizers.base import DEFAULT_SUMMARY_FIELDS, Summarizer, SummaryRequest, SummaryResult
from contextkeep._summarizers.extractive import ExtractiveSummarizer
from contextkeep._summarizers.llm import SUMMARY_MARKER, LLMSummarizer, default_summary_schema, validate_json

__all__ = [
    "DEFAULT_SUMMARY_FIELDS",
    "SUMMARY_MARKER",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "default_summary_schema",
    "render_summary",
    "validate_json",
]
