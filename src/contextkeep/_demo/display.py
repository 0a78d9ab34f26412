"""The demo's terminal view: a live context-window indicator and one line per compaction."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from contextkeep._baseline import BaselineFigures, UsageState, UsageStatus, ui_text
from contextkeep._config import ContextConfig
from contextkeep._events import Event

__all__ = ["Display", "settings_lines"]

_STATES = {
    "normal": "normal",
    "warning": "WARNING",
    "error": "ERROR",
    "critical": "CRITICAL",
    "overflow": "OVERFLOW",
}


def settings_lines(config: ContextConfig, window: int | None) -> list[str]:
    """The thresholds the demo runs under, once, as shares of the one budget every line shows."""
    if window is None:
        return ["window: the model's own (read from the provider); thresholds are ContextConfig's"]
    budget = window - config.reserved_tokens
    lines = [
        f"window {window:,} tokens − {config.reserved_tokens:,} reserved for the reply = "
        f"a {budget:,}-token budget; every % below is of this budget",
    ]
    trigger = f"{config.warning_threshold:.0%}"
    if config.trigger_ratio is not None:  # AgentScope's trigger is a share of the window
        tokens = int(config.trigger_ratio * window)
        trigger = (
            f"{tokens / budget:.0%} ({tokens:,} tokens: trigger_ratio {config.trigger_ratio} × the window)"
        )
    lines += [
        f"compacts (L1 mask, L2 drop, L3 summary) when a view passes {trigger} or the provider's "
        f"confirmed usage passes {config.compression_threshold_ratio:.0%}, down to {config.target_ratio:.0%}",
        f"indicator: WARNING from {config.warning_threshold:.0%}, ERROR from {config.error_threshold:.0%}, "
        f"CRITICAL from {config.critical_threshold:.0%}; L0 cuts tool results over "
        f"{config.result_limit(window):,} tokens",
    ]
    return lines


@dataclass
class Display:
    """Prints events as they happen and keeps the figures for the closing report."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    """Where to print."""
    calls: int = 0
    """Views prepared (one per model call)."""
    peak: int = 0
    """Largest view, in tokens."""
    cumulative: int = 0
    """Prompt tokens sent over all calls."""
    saved: int = 0
    """Tokens compaction removed from views, summed over compactions."""
    layers: dict[str, int] = field(default_factory=dict)
    """How often each layer ran."""
    offloaded: set[str] = field(default_factory=set)
    """Workspace references written."""
    recoveries: int = 0
    """Overflows recovered."""
    last_usage: str = ""
    """The usage indicator text after the newest call."""

    def __call__(self, event: Event) -> None:
        """Print the event if this display has a handler for its type."""
        handler = getattr(self, "_" + event.type.replace(".", "_"), None)
        if handler is not None:
            handler(event.to_dict())

    def settings(self, config: ContextConfig, window: int | None) -> None:
        """Print the settings once, before the first call."""
        for line in settings_lines(config, window):
            self._print(line)
        self._print("")

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _context_status(self, e: dict[str, Any]) -> None:
        if e["compact_layer"] is not None:
            return  # per-layer statuses are summed up by the compaction line
        self.calls += 1
        self.peak = max(self.peak, e["used"])
        self.cumulative += e["used"]
        if e["ratio"] is None:
            self._print(f"[call {self.calls:3d}] {e['used']:>6,} tokens (capacity unknown)")
            return
        filled = min(int(e["ratio"] * 20), 20)
        bar = "█" * filled + "░" * (20 - filled)
        state = _STATES.get(e["state"], e["state"])
        self._print(
            f"[call {self.calls:3d}] {bar} {e['ratio'] * 100:5.1f}% {state:8} "
            f"{e['used']:>6,}/{e['budget']:,} tokens ({e['source']})"
        )

    def _context_compression_completed(self, e: dict[str, Any]) -> None:
        layers = [x for x in e["layer"].split(",") if x and x != "none"]
        for layer in layers:
            self.layers[layer] = self.layers.get(layer, 0) + 1
        self.saved += max(e["tokens_before"] - e["tokens_after"], 0)
        self.offloaded.update(e["references"])
        self._print(
            f"           ⇣ compacted [{'+'.join(layers)}] ({e['compression_reason']}): "
            f"{e['tokens_before']:,} → {e['tokens_after']:,} tokens; usage: {e['usage_status']}"
        )

    def _context_compression_required(self, e: dict[str, Any]) -> None:
        self._print(
            f"           ⚑ confirmed baseline {e['next_call_baseline_tokens']:,} tokens reached "
            f"{e['threshold_ratio']:.0%}: near the limit — will compact before the next call"
        )

    def _context_compression_failed(self, e: dict[str, Any]) -> None:
        self._print(f"           ✗ summary failed ({e['error']}); breaker open: {e['breaker_open']}")

    def _tool_result_truncated(self, e: dict[str, Any]) -> None:
        self.layers["L0"] = self.layers.get("L0", 0) + 1
        self.offloaded.add(e["reference"])
        self._print(
            f"           ✂ L0 truncated a tool result: {e['tokens_before']:,} → {e['tokens_after']:,} tokens "
            f"(full text: {e['reference']})"
        )

    def _context_offloaded(self, e: dict[str, Any]) -> None:
        self.offloaded.add(e["reference"])

    def _model_completed(self, e: dict[str, Any]) -> None:
        state = UsageState(UsageStatus(e["usage_status"]), e["next_call_baseline_tokens"])
        figures = BaselineFigures(None, e["baseline_ratio"], e["remaining_baseline_tokens"])
        self.last_usage = ui_text(state, figures, compression_required=e["compression_required"])
        self._print(f"           ✓ provider usage: {self.last_usage}")

    def _model_recovery_started(self, e: dict[str, Any]) -> None:
        self._print(
            f"           ⚠ provider said the context is too long ({e['phase']}: it counted "
            f"{e['requested']:,} tokens against its limit of {e['limit']:,}) — compacting and retrying"
        )

    def _model_recovery_succeeded(self, e: dict[str, Any]) -> None:
        self.recoveries += 1
        self._print(f"           ✓ recovered: retried with {e['tokens_after']:,} tokens")

    def _model_recovery_failed(self, e: dict[str, Any]) -> None:
        self._print(f"           ✗ recovery failed: {e['reason']}")
