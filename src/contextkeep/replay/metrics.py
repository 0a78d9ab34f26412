"""What a replay measured, per model call and per trajectory.

Every figure is defined on the views a replay prepared (`View.neutral`, counted with
the replay's token counter) and the trajectory it replayed:

- **view tokens**: prompt tokens of the view sent at a call; **peak** is their maximum,
  **cumulative** their sum over the calls.
- **raw tokens**: prompt tokens of the same call with no compaction and an unlimited
  window (every transcript message before the call); **raw cumulative** their sum.
- **compactions**: per layer, how many times it changed the compaction state
  (`ReplayResult.compactions`).
- **calls over budget**: calls whose view exceeded `window - reserve`.
- **invariant violations**: views holding a tool call without its result or a result
  without its call.
- **FRR** (future-reference retention): see :class:`RetentionProbe`.
- **cacheable prefix**: see :class:`CacheModel` and :func:`shared_prefix_tokens`.
- **cost**: see :class:`Pricing`; output tokens are left out of both sides (a replay
  does not change the replies), so `cost_ratio` is the prompt-side cost ratio.
- **count error**: the raw count against the provider's recorded `prompt_tokens`.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from genai_prices import Usage as PriceUsage
from genai_prices import calc_price

from contextkeep.errors import ContextKeepError
from contextkeep.messages import Message, message_from_dict
from contextkeep.offload.workspace import Workspace
from contextkeep.replay.engine import CallResult, CallTotals, ReplayResult, references_in
from contextkeep.replay.trajectories import Trajectory
from contextkeep.tokens import TokenCounter
from contextkeep.view import View

__all__ = [
    "CacheModel",
    "CallMetrics",
    "MetricsRecorder",
    "Pricing",
    "RetentionProbe",
    "TrajectoryMetrics",
    "extract_terms",
    "searchable",
    "shared_prefix_tokens",
]

logger = logging.getLogger("contextkeep.replay.metrics")

Tools = Sequence[Mapping[str, Any]] | None

_TERM_PATTERNS = (
    r"[\w.-]*\w/[\w./-]*\w",  # file paths: at least one slash between word characters
    r"\b\w+\.(?:py|pyi|txt|cfg|toml|ini|json|ya?ml|md|rst|sh|js|ts|c|h|go|rs|java|html|css|sql)\b",
    r"\b\w*(?:Error|Exception|Warning)\b",  # error names
    r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b",  # dotted names (module.attr, self.x)
    r"\b[A-Za-z]*_\w*[A-Za-z0-9]\b",  # snake_case identifiers
    r"\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b",  # camelCase and CamelCase identifiers
    r"(?<![\w.])\d+\.\d+(?![\w.])|(?<![\w.])\d{3,}(?![\w.])",  # decimals, integers of 3+ digits
)
_TERMS = re.compile("|".join(f"(?:{p})" for p in _TERM_PATTERNS))


def extract_terms(text: str) -> set[str]:
    """The identifiers, file paths, numbers and error names in `text`.

    Exactly the matches of these patterns, each 4+ characters long except numbers:
    file paths (word characters around at least one `/`, or a name with a known file
    extension), error names (`…Error`, `…Exception`, `…Warning`), dotted names
    (`a.b`), snake_case names (containing `_`), camelCase / CamelCase names (an inner
    capital), decimals (`3.14`) and integers of three or more digits.
    """
    return {t for t in _TERMS.findall(text) if len(t) >= 4 or t[0].isdigit()}


def searchable(message: Message) -> str:
    """The text a term is looked for in: the content plus every tool call's name and arguments."""
    calls = "".join(f"\n{c.name} {c.arguments}" for c in message.tool_calls)
    return message.text + calls


@dataclass(frozen=True, slots=True)
class CacheModel:
    """A provider's prefix cache: which shared prefix it can serve from cache.

    A shared prefix of `n` tokens is cached as `n` rounded down to a multiple of
    `block`, and nothing when `n < minimum` (OpenAI: 128-token blocks from 1,024).
    """

    block: int = 128
    """Cache granularity in tokens."""
    minimum: int = 1_024
    """Shortest prefix the provider caches."""

    def cacheable(self, shared: int) -> int:
        """Tokens of a `shared`-token prefix served from cache."""
        return 0 if shared < self.minimum else shared // self.block * self.block


def shared_prefix_tokens(
    counter: TokenCounter, previous: Sequence[Message], current: Sequence[Message], tools: Tools = None
) -> tuple[int, bool]:
    """Tokens of `current` identical, from the start, to `previous`; and whether the prefix broke.

    Measured at message granularity: the longest run of leading messages equal in
    both (same content, calls and roles), counted as a prompt with the same tools and
    capped at both prompts' size. The prefix *breaks* when that run is shorter than
    `previous` (some message the previous view sent is not repeated in place).
    """
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a.key != b.key:
            break
        n += 1
    broke = bool(previous) and n < len(previous)
    if n == 0:
        return 0, broke
    shared = counter.count_prompt(current[:n], tools)
    return min(shared, counter.count_prompt(current, tools)), broke


@dataclass(frozen=True, slots=True)
class Pricing:
    """Cache-aware prompt prices of one model, from `genai-prices`.

    A prompt of `input` tokens of which `cached` come from the prefix cache costs
    `cached` at the cache-read price; the rest is written to the cache (cache-write
    price where the model has one, its input price otherwise, as genai-prices does).
    `at` pins the price date: some providers (DeepSeek) charge less at night.
    """

    model: str = "deepseek-chat"
    """Model whose prices apply (a genai-prices model reference)."""
    provider: str | None = None
    """genai-prices provider id; `None` lets genai-prices match the model."""
    at: datetime = datetime(2025, 10, 1, 12, tzinfo=UTC)
    """Request time used to select the price (standard daytime prices by default)."""

    def cost(self, input_tokens: int, cached_tokens: int) -> float:
        """USD of one prompt."""
        if input_tokens <= 0:
            return 0.0
        usage = PriceUsage(
            input_tokens=input_tokens,
            cache_read_tokens=cached_tokens,
            cache_write_tokens=input_tokens - cached_tokens,
        )
        try:
            price = calc_price(usage, self.model, provider_id=self.provider, genai_request_timestamp=self.at)
        except LookupError as exc:
            raise ContextKeepError(f"no price for model {self.model!r}: {exc}") from None
        return float(price.input_price)


@dataclass(frozen=True, slots=True)
class RetentionProbe:
    """One FRR probe: a term a later reply uses whose first occurrence compaction removed or shortened.

    For the reply produced by call `call` (transcript index `reply`), each term of
    :func:`extract_terms` in the reply's searchable text whose first occurrence (the
    lowest transcript index whose searchable text contains it) lies in an earlier
    message that the call's view does not show verbatim is a probe. It is *in view*
    when the term occurs in the view's searchable text, *recoverable* when it is in
    view or occurs in the text behind a reference the view shows (read via the workspace).
    """

    call: int
    """Position of the call in the replay."""
    term: str
    """The term."""
    first: int
    """Transcript index of the term's first occurrence."""
    in_view: bool
    """The term is in the view."""
    references: tuple[str, ...] = ()
    """References the view showed (searched when the term is not in view)."""
    recoverable: bool = False
    """In view, or behind one of `references`."""


@dataclass(frozen=True, slots=True)
class CallMetrics(CallResult):
    """Everything measured at one call (the engine's figures, then these)."""

    shared_tokens: int
    """View tokens identical, from the start, to the previous view."""
    cached_tokens: int
    """`shared_tokens` at the cache's granularity (served from cache)."""
    prefix_break: bool
    """The previous view is not a prefix of this one."""
    raw_cached_tokens: int
    """Cached tokens of the raw prompt against the previous raw prompt."""
    cost: float
    """USD of the view, cache-aware."""
    raw_cost: float
    """USD of the raw prompt, cache-aware."""
    provider_tokens: int | None = None
    """The provider's recorded `prompt_tokens` for the original call."""
    provider_cached_tokens: int | None = None
    """The provider's recorded cache hits for the original call."""
    probes: tuple[RetentionProbe, ...] = ()
    """FRR probes of this call's reply."""

    @property
    def count_error_pct(self) -> float | None:
        """Signed error of `raw_tokens` in percent of the provider's `prompt_tokens`."""
        if not self.provider_tokens:
            return None
        return (self.raw_tokens - self.provider_tokens) / self.provider_tokens * 100


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


@dataclass(slots=True)
class TrajectoryMetrics(CallTotals):
    """Per-trajectory figures: sums, maxima and ratios over :class:`CallMetrics`."""

    name: str
    """The trajectory."""
    calls: list[CallMetrics] = field(default_factory=list)
    """Every call, in order."""
    compactions: dict[str, int] = field(default_factory=dict)
    """How many times each layer changed the compaction state."""
    recorded_cost: float | None = None
    """USD of the provider's recorded prompt usage (with its cache hits), when every call has it."""

    @property
    def cumulative_view_tokens(self) -> int:
        """Sum of the views' tokens."""
        return sum(c.view_tokens for c in self.calls)

    @property
    def cumulative_raw_tokens(self) -> int:
        """Sum of the raw prompts' tokens."""
        return sum(c.raw_tokens for c in self.calls)

    @property
    def probes(self) -> list[RetentionProbe]:
        """Every FRR probe."""
        return [p for c in self.calls for p in c.probes]

    @property
    def frr_in_view(self) -> float | None:
        """Probes in view / probes (`None` without probes: compaction never hid a reused term)."""
        probes = self.probes
        return _ratio(sum(p.in_view for p in probes), len(probes))

    @property
    def frr_recoverable(self) -> float | None:
        """Probes in view or behind a reference in view / probes."""
        probes = self.probes
        return _ratio(sum(p.recoverable for p in probes), len(probes))

    @property
    def cacheable_prefix_fraction(self) -> float | None:
        """Cached view tokens / view tokens, summed over the calls (the first call has none)."""
        return _ratio(sum(c.cached_tokens for c in self.calls), self.cumulative_view_tokens)

    @property
    def prefix_breaks(self) -> int:
        """Calls whose view does not start with the whole previous view."""
        return sum(c.prefix_break for c in self.calls)

    @property
    def cost(self) -> float:
        """USD of every view."""
        return sum(c.cost for c in self.calls)

    @property
    def raw_cost(self) -> float:
        """USD of every raw prompt."""
        return sum(c.raw_cost for c in self.calls)

    @property
    def cost_ratio(self) -> float | None:
        """`cost / raw_cost`."""
        return _ratio(self.cost, self.raw_cost)

    @property
    def count_error_pct(self) -> float | None:
        """Median absolute count error over the calls with recorded usage."""
        errors = [abs(e) for c in self.calls if (e := c.count_error_pct) is not None]
        return statistics.median(errors) if errors else None

    def to_dict(self) -> dict[str, Any]:
        """The summary figures as JSON-ready values."""

        def r(x: float | None, digits: int = 4) -> float | None:
            return None if x is None else round(x, digits)

        return {
            "trajectory": self.name,
            "calls": len(self.calls),
            "peak_view_tokens": self.peak_view_tokens,
            "cumulative_view_tokens": self.cumulative_view_tokens,
            "cumulative_raw_tokens": self.cumulative_raw_tokens,
            "over_budget_calls": self.over_budget_calls,
            "invariant_violations": self.invariant_violations,
            "compactions": dict(self.compactions),
            "frr_probes": len(self.probes),
            "frr_in_view": r(self.frr_in_view),
            "frr_recoverable": r(self.frr_recoverable),
            "cacheable_prefix_fraction": r(self.cacheable_prefix_fraction),
            "prefix_breaks": self.prefix_breaks,
            "cost_usd": r(self.cost, 6),
            "raw_cost_usd": r(self.raw_cost, 6),
            "cost_ratio": r(self.cost_ratio),
            "recorded_cost_usd": r(self.recorded_cost, 6),
            "count_error_pct": r(self.count_error_pct, 3),
        }


def _transcript_id(message: Message, index: int) -> str:
    # Session.add stamps messages without an id with their transcript position.
    return message.id or f"m{index:06d}"


class _FirstSeen:
    """Transcript index of each term's first occurrence (one search of the concatenated text)."""

    def __init__(self, messages: Sequence[Message]) -> None:
        texts = [searchable(m) for m in messages]
        self._starts: list[int] = []
        position = 0
        for t in texts:
            self._starts.append(position)
            position += len(t) + 1
        self._text = "\x00".join(texts)
        self._cache: dict[str, int] = {}

    def __call__(self, term: str) -> int:
        found = self._cache.get(term)
        if found is None:
            at = self._text.find(term)
            found = self._cache[term] = bisect_right(self._starts, at) - 1 if at >= 0 else -1
        return found


@dataclass(slots=True)
class _Pending:
    shared: int
    cached: int
    broke: bool
    raw_cached: int
    probes: list[RetentionProbe]


class MetricsRecorder:
    """Collects per-call figures during a replay (pass `observe` as `on_view`), then `finish`es them."""

    def __init__(
        self,
        trajectory: Trajectory,
        counter_factory: Callable[[], TokenCounter],
        *,
        cache: CacheModel | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        self.trajectory = trajectory
        self.cache = cache or CacheModel()
        self.pricing = pricing or Pricing()
        self._view_counter = counter_factory()
        self._raw_counter = counter_factory()
        self._first = _FirstSeen(trajectory.messages)
        self._ids = [_transcript_id(m, i) for i, m in enumerate(trajectory.messages)]
        self._previous: list[Message] = []
        self._previous_raw: list[Message] = []
        self._pending: list[_Pending] = []

    def observe(self, index: int, view: View) -> None:
        """Measure the view prepared for the call that produced transcript message `index`."""
        tools = self.trajectory.tools
        shared, broke = shared_prefix_tokens(self._view_counter, self._previous, view.neutral, tools)
        raw = self.trajectory.messages[:index]
        raw_shared, _ = shared_prefix_tokens(self._raw_counter, self._previous_raw, raw, tools)
        self._previous, self._previous_raw = list(view.neutral), raw
        probes = self._probes(len(self._pending), index, view.neutral)
        self._pending.append(
            _Pending(shared, self.cache.cacheable(shared), broke, self.cache.cacheable(raw_shared), probes)
        )

    def _probes(self, call: int, index: int, view: Sequence[Message]) -> list[RetentionProbe]:
        verbatim = {m.id: m.key for m in view if m.id}
        text = "\x00".join(searchable(m) for m in view)
        references: tuple[str, ...] | None = None
        out = []
        for term in sorted(extract_terms(searchable(self.trajectory.messages[index]))):
            first = self._first(term)
            if not 0 <= first < index:
                continue
            original = self.trajectory.messages[first]
            if verbatim.get(self._ids[first]) == original.key:
                continue  # shown as recorded: nothing was removed or shortened
            present = term in text
            if not present and references is None:
                references = tuple(dict.fromkeys(references_in(list(view))))
            out.append(RetentionProbe(call, term, first, present, () if present else references or ()))
        return out

    async def finish(self, result: ReplayResult, workspace: Workspace) -> TrajectoryMetrics:
        """Combine the replay's results with the recorded figures; read references for FRR."""
        texts: dict[str, str] = {}
        metrics = TrajectoryMetrics(result.name, compactions=result.compactions)
        for call, pending, recorded in zip(result.calls, self._pending, self.trajectory.calls, strict=True):
            probes = [await self._resolve(p, workspace, texts) for p in pending.probes]
            usage = recorded.usage or {}
            metrics.calls.append(
                CallMetrics(
                    call.index,
                    call.view_tokens,
                    call.raw_tokens,
                    call.layers,
                    call.over_budget,
                    call.violations,
                    pending.shared,
                    pending.cached,
                    pending.broke,
                    pending.raw_cached,
                    self.pricing.cost(call.view_tokens, pending.cached),
                    self.pricing.cost(call.raw_tokens, pending.raw_cached),
                    _int(usage.get("prompt_tokens")),
                    _provider_cached(usage),
                    tuple(probes),
                )
            )
        if metrics.calls and all(c.provider_tokens for c in metrics.calls):
            metrics.recorded_cost = sum(
                self.pricing.cost(c.provider_tokens or 0, c.provider_cached_tokens or 0)
                for c in metrics.calls
            )
        return metrics

    async def _resolve(
        self, probe: RetentionProbe, workspace: Workspace, texts: dict[str, str]
    ) -> RetentionProbe:
        found = probe.in_view
        for ref in probe.references:
            if found:
                break
            if ref not in texts:
                texts[ref] = await _reference_text(workspace, ref)
            found = probe.term in texts[ref]
        return RetentionProbe(probe.call, probe.term, probe.first, probe.in_view, probe.references, found)


async def _reference_text(workspace: Workspace, reference: str) -> str:
    """The searchable text behind a reference (offloaded message spans are decoded from JSONL)."""
    try:
        raw = await workspace.read(reference)
    except ContextKeepError as exc:
        logger.warning("reference %s unreadable: %s", reference, exc)
        return ""
    if ".jsonl" not in reference:
        return raw
    lines = (json.loads(line) for line in raw.splitlines() if line.strip())
    return "\x00".join(searchable(message_from_dict(d)) for d in lines)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _provider_cached(usage: Mapping[str, Any]) -> int | None:
    """DeepSeek's `prompt_cache_hit_tokens`, else OpenAI's `prompt_tokens_details.cached_tokens`."""
    hit = _int(usage.get("prompt_cache_hit_tokens"))
    if hit is not None:
        return hit
    details = usage.get("prompt_tokens_details")
    return _int(details.get("cached_tokens")) if isinstance(details, Mapping) else None
