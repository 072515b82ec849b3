"""The hard limits on spend: one owner that every provider call and every spawn asks first.

Two kinds:
1. Helpers: how many helpers one turn may start (usage.limits.helpersPerTurn), and how long a
   chain of helpers may grow where each was started by the previous one's report
   (usage.limits.helperChain). A turn knows which it is through `current_turn`: a user turn
   (or a job's) is depth 0, the turn handling the report of a helper of depth n has depth n.
2. Tokens a day (local midnight to midnight), read from the ledger so every process counts:
   background work (cron jobs and the heartbeat, with their helpers and consolidation) per job
   (usage.limits.jobDailyTokens) and in total (usage.limits.backgroundDailyTokens), and
   optionally everything (usage.limits.dailyTokens). A call past a limit is not sent.

Every refusal is one line naming the limit, what it stopped and the config key that raises it.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from nanobot.config import UsageLimits
from nanobot.errors import SpendLimitReached
from nanobot.usage.ledger import DaySpend


@dataclass
class TurnScope:
    """The turn running now, as the helper limits see it."""

    kind: str = "user"  # "user" (a user's or a job's turn) | "report" (a helper's report)
    depth: int = 0  # the report of a helper of depth n runs at depth n
    helpers: int = 0  # helpers this turn started
    told: bool = False  # its limit notice was given


current_turn: ContextVar[TurnScope | None] = ContextVar("nanobot_current_turn", default=None)


def helper_refusal(limits: UsageLimits, scope: TurnScope | None) -> str | None:
    """The line saying why one more helper may not start in `scope`, or None when it may."""
    depth = (scope.depth if scope else 0) + 1
    if limits.helper_chain and depth > limits.helper_chain:
        return (
            f"a helper was not started: {limits.helper_chain} helpers in a row were each started by the "
            f"previous one's report (usage.limits.helperChain = {limits.helper_chain}; raise it in the config "
            "for longer chains)"
        )
    if scope is not None and limits.helpers_per_turn and scope.helpers >= limits.helpers_per_turn:
        return (
            f"a helper was not started: this turn already started {scope.helpers} "
            f"(usage.limits.helpersPerTurn = {limits.helpers_per_turn}; raise it in the config to allow more)"
        )
    return None


def _tokens(n: int) -> str:
    return f"{n:,} tokens"


def token_refusal(limits: UsageLimits, day: DaySpend, job: str | None) -> SpendLimitReached | None:
    """Why a call for `job` (None: not background work) may not be sent today, or None."""
    if limits.daily_tokens and day.total >= limits.daily_tokens:
        return SpendLimitReached(
            f"the daily token limit is reached ({_tokens(day.total)} today, usage.limits.dailyTokens = "
            f"{limits.daily_tokens:,}); nothing more is sent to the model until midnight",
            key="dailyTokens",
        )
    if job is None:
        return None
    what = "the heartbeat" if job == "heartbeat" else f"cron job {job}"
    if limits.background_daily_tokens and day.background >= limits.background_daily_tokens:
        return SpendLimitReached(
            f"background work is paused: cron jobs and the heartbeat spent {_tokens(day.background)} today "
            f"(usage.limits.backgroundDailyTokens = {limits.background_daily_tokens:,}); jobs due meanwhile are "
            "skipped until midnight",
            key="backgroundDailyTokens",
        )
    spent = day.by_job.get(job, 0)
    if limits.job_daily_tokens and spent >= limits.job_daily_tokens:
        return SpendLimitReached(
            f"{what} is paused: it spent {_tokens(spent)} today (usage.limits.jobDailyTokens = "
            f"{limits.job_daily_tokens:,}); it waits until midnight",
            key="jobDailyTokens",
        )
    return None
