"""Every form of schedule, driven by explicit instants (the fake clock's view), across DST changes."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from nanobot.cron.schedule import (
    Schedule,
    ScheduleError,
    describe,
    format_ms,
    next_run,
    occurrences_between,
    parse_schedule,
)

NY = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def ms(*args, tz=NY) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def firings(schedule, start_ms, n, anchor_ms=0):
    out, t = [], start_ms
    for _ in range(n):
        t = next_run(schedule, t, anchor_ms=anchor_ms)
        if t is None:
            break
        out.append(format_ms(t, schedule.tz))
    return out


def test_every_fires_on_a_grid_anchored_at_creation_and_does_not_drift_when_late():
    s = parse_schedule(every_seconds=600, now_ms=1_000_000)
    assert s == Schedule("every", every_ms=600_000)
    assert next_run(s, 1_000_000, anchor_ms=1_000_000) == 1_600_000
    # a runner that looks 7 minutes late still lands on the grid, not 10 minutes after it looked
    assert next_run(s, 1_600_000 + 420_000, anchor_ms=1_000_000) == 2_200_000
    assert occurrences_between(s, 1_000_000, 1_000_000 + 3_600_000, anchor_ms=1_000_000) == 6


def test_at_fires_once_and_a_naive_time_uses_the_given_zone():
    now = ms(2026, 3, 1, 8, 0)
    s = parse_schedule(at="2026-03-01T10:30", tz="America/New_York", now_ms=now)
    assert s.at_ms == ms(2026, 3, 1, 10, 30)
    assert next_run(s, now, anchor_ms=now) == s.at_ms
    assert next_run(s, s.at_ms, anchor_ms=now) is None
    explicit = parse_schedule(at="2026-03-01T16:30:00Z", now_ms=now)
    assert explicit.at_ms == s.at_ms + 60 * 60_000  # 16:30 UTC is 11:30 in New York (EST)


def test_cron_in_a_zone_fires_at_local_wall_clock_time_on_both_sides_of_spring_forward():
    s = parse_schedule(cron_expr="0 9 * * *", tz="America/New_York", now_ms=0)
    got = firings(s, ms(2026, 3, 7, 12, 0), 3)
    assert got == ["2026-03-08 09:00 EDT", "2026-03-09 09:00 EDT", "2026-03-10 09:00 EDT"]
    # 23 hours between the two 9 o'clocks around the jump: local time was kept, not the interval
    assert next_run(s, ms(2026, 3, 7, 9, 0), anchor_ms=0) - ms(2026, 3, 7, 9, 0) == 23 * 3600_000


def test_a_time_skipped_by_spring_forward_fires_right_after_the_jump_once():
    s = parse_schedule(cron_expr="30 2 * * *", tz="America/New_York", now_ms=0)
    assert firings(s, ms(2026, 3, 7, 12, 0), 3) == [
        "2026-03-08 03:00 EDT",
        "2026-03-09 02:30 EDT",
        "2026-03-10 02:30 EDT",
    ]


def test_a_time_repeated_by_fall_back_fires_once_but_hourly_jobs_run_every_elapsed_hour():
    daily = parse_schedule(cron_expr="30 1 * * *", tz="America/New_York", now_ms=0)
    assert firings(daily, ms(2026, 10, 31, 12, 0), 3) == [
        "2026-11-01 01:30 EDT",
        "2026-11-02 01:30 EST",
        "2026-11-03 01:30 EST",
    ]
    hourly = parse_schedule(cron_expr="0 * * * *", tz="America/New_York", now_ms=0)
    assert firings(hourly, ms(2026, 11, 1, 0, 30), 3) == [
        "2026-11-01 01:00 EDT",
        "2026-11-01 01:00 EST",
        "2026-11-01 02:00 EST",
    ]


def test_the_same_expression_in_two_zones_fires_at_different_instants():
    ny = parse_schedule(cron_expr="0 9 * * 1-5", tz="America/New_York", now_ms=0)
    berlin = parse_schedule(cron_expr="0 9 * * 1-5", tz="Europe/Berlin", now_ms=0)
    start = ms(
        2026, 3, 27, 12, 0, tz=BERLIN
    )  # a Friday; Europe springs forward on the 29th, the US did on the 8th
    assert firings(berlin, start, 2) == ["2026-03-30 09:00 CEST", "2026-03-31 09:00 CEST"]
    assert firings(ny, start, 1) == ["2026-03-27 09:00 EDT"]
    assert describe(berlin) == "cron '0 9 * * 1-5' (Europe/Berlin)"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({}, "exactly one"),
        ({"every_seconds": 60, "cron_expr": "* * * * *"}, "exactly one"),
        ({"every_seconds": 0}, "every_seconds"),
        ({"every_seconds": 30}, "at least 60"),
        ({"every_seconds": 60, "tz": "UTC"}, "tz applies"),
        ({"cron_expr": "61 * * * *"}, "invalid cron"),
        ({"cron_expr": "0 9 * *"}, "invalid cron"),
        ({"cron_expr": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"at": "tomorrow at 9"}, "invalid ISO"),
        ({"at": "2020-01-01T00:00"}, "in the past"),
        ({"cron_expr": "0 0 30 2 *"}, "never fires"),
    ],
)
def test_bad_schedules_are_refused_with_a_message_that_says_what_to_write(kwargs, fragment):
    with pytest.raises(ScheduleError) as err:
        parse_schedule(now_ms=ms(2026, 1, 1, 0, 0), **kwargs)
    assert fragment in str(err.value)
