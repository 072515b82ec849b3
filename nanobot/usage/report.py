"""What `nanobot usage` and `nanobot status` say about spend: totals by period, source and model.

Costs are estimated only from the prices the user set (usage.prices, per million tokens); there
is no built-in price list to go stale. Prompt tokens read from the cache are priced at
`cacheRead`, those written to it at `cacheWrite` (each the input price when unset).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanobot.config import ModelPrice, UsageLimits
from nanobot.usage.ledger import DaySpend, UsageRecord, day_start, read_records

PERIODS = (("today", 1), ("7 days", 7), ("30 days", 30))


def cost_of(record: UsageRecord, price: ModelPrice) -> float:
    """The record's cost at `price` (per million tokens)."""
    cache_read = price.cache_read if price.cache_read is not None else price.input
    cache_write = price.cache_write if price.cache_write is not None else price.input
    plain = max(0, record.prompt - record.cache_read - record.cache_write)
    return (
        plain * price.input
        + record.cache_read * cache_read
        + record.cache_write * cache_write
        + record.completion * price.output
    ) / 1_000_000


@dataclass
class Bucket:
    calls: int = 0
    prompt: int = 0
    completion: int = 0
    cache_read: int = 0
    cache_write: int = 0
    estimated: int = 0  # calls whose counts nanobot estimated (the provider reported none)
    failed: int = 0  # calls that ended in an error
    cancelled: int = 0  # calls stopped midway (Ctrl-C, /stop, a deadline): not a failure
    cut: int = 0  # attempts whose connection broke mid-answer and were made again (each billed)
    cost: float = 0.0
    unpriced: int = 0  # calls of models with no price in usage.prices

    def add(self, record: UsageRecord, price: ModelPrice | None) -> None:
        self.calls += 1
        self.prompt += record.prompt
        self.completion += record.completion
        self.cache_read += record.cache_read
        self.cache_write += record.cache_write
        self.estimated += record.estimated
        self.failed += record.outcome not in ("ok", "cancelled", "cut")
        self.cancelled += record.outcome == "cancelled"
        self.cut += record.outcome == "cut"
        if price is None:
            self.unpriced += 1
        else:
            self.cost += cost_of(record, price)

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    @property
    def cache_share(self) -> float:
        """The share of prompt tokens read from the cache."""
        return self.cache_read / self.prompt if self.prompt else 0.0

    def to_json(self, priced: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "calls": self.calls,
            "promptTokens": self.prompt,
            "completionTokens": self.completion,
            "cacheReadTokens": self.cache_read,
            "cacheWriteTokens": self.cache_write,
            "cacheReadShare": round(self.cache_share, 4),
            "estimatedCalls": self.estimated,
            "failedCalls": self.failed,
            "cancelledCalls": self.cancelled,
            "cutCalls": self.cut,
        }
        if priced:
            out["cost"] = round(self.cost, 6)
            out["unpricedCalls"] = self.unpriced
        return out


@dataclass
class Period:
    label: str
    since: float
    total: Bucket = field(default_factory=Bucket)
    by_source: dict[str, Bucket] = field(default_factory=dict)
    by_model: dict[str, Bucket] = field(default_factory=dict)

    def add(self, record: UsageRecord, price: ModelPrice | None) -> None:
        self.total.add(record, price)
        self.by_source.setdefault(record.source, Bucket()).add(record, price)
        self.by_model.setdefault(record.model, Bucket()).add(record, price)

    def to_json(self, priced: bool) -> dict[str, Any]:
        def table(buckets: dict[str, Bucket]) -> dict[str, Any]:
            return {
                k: b.to_json(priced)
                for k, b in sorted(buckets.items(), key=lambda kv: -kv[1].tokens)
            }

        return {
            "since": time.strftime("%Y-%m-%d", time.localtime(self.since)),
            **self.total.to_json(priced),
            "bySource": table(self.by_source),
            "byModel": table(self.by_model),
        }


def summarise(
    records: Iterable[UsageRecord], *, now: float, prices: dict[str, ModelPrice]
) -> list[Period]:
    """Today, the last 7 days and the last 30 (each counted from local midnight)."""
    periods = [Period(label, day_start(now - (days - 1) * 86_400)) for label, days in PERIODS]
    for record in records:
        price = prices.get(record.model)
        for period in periods:
            if record.t >= period.since:
                period.add(record, price)
    return periods


def usage_report(
    *, prices: dict[str, ModelPrice], directory: Path | None = None, now: float | None = None
) -> list[Period]:
    now = time.time() if now is None else now
    oldest = day_start(now - (PERIODS[-1][1] - 1) * 86_400)
    return summarise(read_records(directory, since=oldest), now=now, prices=prices)


def today_line(day: DaySpend, limits: UsageLimits) -> str:
    """`nanobot status`'s one line about today's spend."""
    calls = f"{day.calls} call{'s' if day.calls != 1 else ''}"
    background = f"background {day.background:,}"
    if limits.background_daily_tokens:
        background += f" of {limits.background_daily_tokens:,} allowed"
    total = f"{day.total:,} tokens" + (
        f" of {limits.daily_tokens:,} allowed" if limits.daily_tokens else ""
    )
    return f"today {calls}, {total} ({background}); `nanobot usage` for more"


def paused_lines(day: DaySpend, limits: UsageLimits) -> list[str]:
    """One line per daily limit reached today (what is paused, and the key that raises it)."""
    from nanobot.usage.limits import token_refusal

    lines: dict[str, str] = {}
    for job in [None, *sorted(day.by_job)]:
        refusal = token_refusal(limits, day, job)
        if refusal is not None:
            lines.setdefault(
                refusal.key + ("" if refusal.key != "jobDailyTokens" else f":{job}"),
                refusal.message,
            )
    return list(lines.values())


def session_line(session: str, *, directory: Path | None = None, now: float | None = None) -> str:
    """The chat's /status line: what this session's model calls spent today."""
    now = time.time() if now is None else now
    spent = Bucket()
    for record in read_records(directory, since=day_start(now)):
        if record.session == session:
            spent.add(record, None)
    if not spent.calls:
        return "no model calls today"
    share = (
        f", {spent.cache_share:.0%} of the prompt read from the cache" if spent.cache_read else ""
    )
    return (
        f"{spent.calls} call{'s' if spent.calls != 1 else ''} today, {spent.tokens:,} tokens "
        f"({spent.prompt:,} prompt, {spent.completion:,} completion{share})"
    )
