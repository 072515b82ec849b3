"""When a job fires: one-shot (`at`), fixed interval (`every`) or a cron expression in a time zone.

Pure functions over epoch milliseconds. Rules:
1. `at` fires once, at its instant.
2. `every` fires on a grid anchored at the job's creation (anchor + k*interval), so a late
   runner never makes the schedule drift.
3. `cron` follows croniter in the job's IANA zone. A wall-clock time skipped by a DST jump
   fires at the first minute after the jump (as cron does); a wall-clock time that occurs
   twice (the hour repeated when clocks go back) fires once, unless the expression's hour
   field is a wildcard (an hourly job still runs every elapsed hour).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nanobot.errors import ScheduleError
from nanobot.messages import parse_iso

__all__ = [
    "Schedule",
    "ScheduleError",
    "next_run",
    "occurrences_between",
    "parse_schedule",
    "zone",
    "describe",
    "format_ms",
]

MIN_EVERY_SECONDS = (
    60  # as cron: each firing is a model turn, and a runaway interval would burn tokens
)
_MAX_COUNT = 10_000  # occurrences counted between two instants (a missed-runs report needs no more)


@dataclass(frozen=True)
class Schedule:
    kind: str  # "at" | "every" | "cron"
    at_ms: int | None = None
    every_ms: int | None = None
    expr: str | None = None
    tz: str | None = None


def zone(name: str | None) -> ZoneInfo | timezone:
    """The IANA zone `name`, or the system's local zone when empty."""
    if not name:
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else UTC  # type: ignore[return-value]
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r}",
            hint="Use an IANA name such as Europe/Berlin, America/New_York or UTC.",
        ) from None


# how the cron tool names the fields; `nanobot cron add` passes CLI_NAMES so errors name its flags
TOOL_NAMES = {
    "every_seconds": "every_seconds",
    "cron_expr": "cron_expr",
    "at": "at",
    "tz": "tz",
    "=": "=",
}
CLI_NAMES = {
    "every_seconds": "--every",
    "cron_expr": "--cron",
    "at": "--at",
    "tz": "--tz",
    "=": " ",
}


def parse_schedule(
    *,
    every_seconds: int | None = None,
    cron_expr: str | None = None,
    tz: str | None = None,
    at: str | None = None,
    default_tz: str = "",
    now_ms: int,
    names: dict[str, str] = TOOL_NAMES,
) -> Schedule:
    """Exactly one of every_seconds, cron_expr, at; `tz` applies to cron_expr and to a naive `at`."""
    n = names
    given = [
        n[name]
        for name, value in (("every_seconds", every_seconds), ("cron_expr", cron_expr), ("at", at))
        if value not in (None, "")
    ]
    if len(given) != 1:
        raise ScheduleError(
            f"give exactly one of {n['every_seconds']}, {n['cron_expr']} or {n['at']}"
            + (f" (got {', '.join(given)})" if given else ""),
            hint=f"{n['every_seconds']}{n['=']}3600 for hourly, {n['cron_expr']}{n['=']}'0 9 * * 1-5' "
            f"for weekdays at 9, {n['at']}{n['=']}'2026-03-01T10:30' for once.",
        )
    if tz and every_seconds not in (None, ""):
        raise ScheduleError(
            f"{n['tz']} applies to {n['cron_expr']} and {n['at']}, not to {n['every_seconds']}"
        )
    if tz:
        zone(tz)
    if every_seconds not in (None, ""):
        if (
            isinstance(every_seconds, bool)
            or not isinstance(every_seconds, int)
            or every_seconds < MIN_EVERY_SECONDS
        ):
            raise ScheduleError(
                f"{n['every_seconds']} must be a whole number of seconds, at least "
                f"{MIN_EVERY_SECONDS}; got {every_seconds!r}",
                hint="Each firing is a full turn of the model.",
            )
        return Schedule("every", every_ms=every_seconds * 1000)
    if cron_expr:
        from croniter import croniter

        expr = " ".join(cron_expr.split())
        if len(expr.split()) != 5 or not croniter.is_valid(expr):
            raise ScheduleError(
                f"invalid cron expression {cron_expr!r}",
                hint="Five fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5'.",
            )
        name = tz or default_tz or None
        schedule = Schedule("cron", expr=expr, tz=name)
        if next_run(schedule, now_ms, anchor_ms=now_ms) is None:
            raise ScheduleError(f"cron expression {expr!r} never fires")
        return schedule
    assert at is not None
    when = parse_iso(at)
    if when is None:
        raise ScheduleError(
            f"invalid ISO time {at!r}",
            hint="Write it like 2026-03-01T10:30 or 2026-03-01T10:30:00+01:00.",
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone(tz or default_tz))
    at_ms = int(when.timestamp() * 1000)
    if at_ms <= now_ms:
        raise ScheduleError(
            f"{at} is in the past ({format_ms(at_ms, tz or default_tz)}; it is now "
            f"{format_ms(now_ms, tz or default_tz)})",
            hint="Give a future time.",  # read by a person at `cron add` and by the model
        )
    return Schedule("at", at_ms=at_ms, tz=tz or default_tz or None)


def next_run(schedule: Schedule, after_ms: int, *, anchor_ms: int) -> int | None:
    """The first firing strictly after `after_ms`, or None when the schedule has no more."""
    if schedule.kind == "at":
        return schedule.at_ms if schedule.at_ms is not None and schedule.at_ms > after_ms else None
    if schedule.kind == "every":
        step = schedule.every_ms or 0
        if step <= 0:
            return None
        if after_ms < anchor_ms:
            return anchor_ms + step
        return anchor_ms + ((after_ms - anchor_ms) // step + 1) * step
    if schedule.kind == "cron" and schedule.expr:
        return _next_cron(schedule.expr, zone(schedule.tz), after_ms)
    return None


def occurrences_between(schedule: Schedule, after_ms: int, until_ms: int, *, anchor_ms: int) -> int:
    """How many firings fall in (after_ms, until_ms] (capped at 10,000)."""
    step = schedule.every_ms or 0
    if schedule.kind == "every" and step > 0 and after_ms >= anchor_ms:
        return min(_MAX_COUNT, (until_ms - anchor_ms) // step - (after_ms - anchor_ms) // step)
    count, t = 0, after_ms
    while count < _MAX_COUNT:
        following = next_run(schedule, t, anchor_ms=anchor_ms)
        if following is None or following > until_ms:
            break
        t = following
        count += 1
    return count


def _next_cron(expr: str, tz, after_ms: int) -> int | None:
    from croniter import croniter

    hour_is_wildcard = "*" in expr.split()[1]
    start = datetime.fromtimestamp(after_ms / 1000, tz)
    it = croniter(expr, start)
    for _ in range(1000):
        try:
            fire: datetime = it.get_next(datetime)
        except Exception:  # croniter gives up on expressions that never match (e.g. 30 February)
            return None
        fire_ms = int(fire.timestamp() * 1000)
        if fire_ms <= after_ms:
            continue
        if not hour_is_wildcard and _is_repeat_of_earlier(fire, tz):
            continue  # the repeated hour after clocks go back: this wall-clock time already fired
        return fire_ms
    return None


def _is_repeat_of_earlier(fire: datetime, tz) -> bool:
    """True when the same wall-clock time already happened earlier (the second pass of a fold)."""
    naive = fire.replace(tzinfo=None)
    first = naive.replace(tzinfo=tz, fold=0)
    return int(first.timestamp()) < int(fire.timestamp())


def format_ms(ms: int | None, tz: str | None = None) -> str:
    """A local time for people, e.g. '2026-03-08 09:00 EDT'."""
    if ms is None:
        return "-"
    when = datetime.fromtimestamp(ms / 1000, zone(tz))
    return when.strftime("%Y-%m-%d %H:%M:%S %Z" if when.second else "%Y-%m-%d %H:%M %Z").strip()


def describe(schedule: Schedule) -> str:
    if schedule.kind == "at":
        return f"once at {format_ms(schedule.at_ms, schedule.tz)}"
    if schedule.kind == "every":
        seconds = (schedule.every_ms or 0) // 1000
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if seconds and seconds % size == 0:
                return f"every {seconds // size}{unit}"
        return f"every {seconds}s"
    return f"cron '{schedule.expr}'" + (f" ({schedule.tz})" if schedule.tz else " (local time)")
