"""`nanobot usage`: what the assistant spent today, in 7 days and in 30, by source and by model."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from nanobot.cli.config_load import load as load_config
from nanobot.cli.consoles import stdout_console
from nanobot.usage.report import Bucket, Period, usage_report


def run_usage(config_path: Path | None, *, json_out: bool) -> int:
    cfg = load_config(config_path)
    prices = cfg.usage.prices
    periods = usage_report(prices=prices)
    if json_out:
        print(json.dumps({p.label: p.to_json(bool(prices)) for p in periods}, indent=2))
        return 0
    console = stdout_console()
    if not periods[-1].total.calls:
        console.print("no model calls recorded in the last 30 days")
        return 0
    for period in periods:
        console.print(_table(period, priced=bool(prices)))
    if not prices:
        console.print(
            "[dim]costs: set usage.prices in the config, e.g. "
            '{"openai/gpt-4.1": {"input": 2.0, "output": 8.0, "cacheRead": 0.5}} (per million tokens)[/dim]'
        )
    return 0


def _table(period: Period, *, priced: bool) -> Table:
    total = period.total
    title = f"{period.label}: {total.calls:,} call{'s' if total.calls != 1 else ''}, {total.tokens:,} tokens"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for name in ("", "calls", "prompt", "completion", "cache read"):
        table.add_column(name, justify="left" if not name else "right")
    if priced:
        table.add_column("cost", justify="right")
    for heading, buckets in (("by source", period.by_source), ("by model", period.by_model)):
        table.add_row(f"[bold]{heading}[/bold]")
        for name, bucket in sorted(buckets.items(), key=lambda kv: -kv[1].tokens):
            table.add_row(f"  {name}", *_cells(bucket, priced))
    table.add_row("[bold]total[/bold]", *_cells(total, priced))
    return table


def _cells(b: Bucket, priced: bool) -> list[str]:
    cells = [f"{b.calls:,}", f"{b.prompt:,}", f"{b.completion:,}", f"{b.cache_share:.0%}"]
    notes = []
    if b.estimated:
        notes.append(f"{b.estimated} estimated")
    if b.failed:
        notes.append(f"{b.failed} failed")
    if b.cancelled:
        notes.append(f"{b.cancelled} cancelled")
    if b.cut:
        notes.append(f"{b.cut} cut and retried")
    if notes:
        cells[0] += f" ({', '.join(notes)})"
    if priced:
        cells.append(f"{b.cost:.4f}" + (f" (+{b.unpriced} unpriced)" if b.unpriced else ""))
    return cells
