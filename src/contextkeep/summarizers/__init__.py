"""Layer-3 summarisers: LLM (structured, incremental) and LLM-free extractive."""

from contextkeep.summarizers.base import DEFAULT_SUMMARY_FIELDS, Summarizer, SummaryRequest, SummaryResult

__all__ = ["DEFAULT_SUMMARY_FIELDS", "Summarizer", "SummaryRequest", "SummaryResult"]
