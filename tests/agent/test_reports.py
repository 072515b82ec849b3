"""Report turns under a daily token limit: held, kept whole in the session, told once with a count."""

from __future__ import annotations

import asyncio

from nanobot.agent.events import Notice
from nanobot.agent.reports import ReportTurns
from nanobot.agent.subagents import HelperRecord, SubagentResult
from nanobot.errors import SpendLimitReached
from nanobot.messages import NOTE_KEY, Message

LIMIT = SpendLimitReached(
    "the daily token limit is reached (1,200 tokens today, usage.limits.dailyTokens = 1,000)",
    key="dailyTokens",
)


class Session:
    """A conversation stand-in: what each report turn would send, and what the session keeps."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.kept: list[Message] = []

    async def inject(self, message: Message, note: Message, *, emit) -> object:
        self.sent.append(message)
        self.kept.append(note)
        await asyncio.sleep(0)
        return None

    async def save_notes(self, notes: list[Message]) -> None:
        self.kept += notes


def _result(n: int) -> SubagentResult:
    record = HelperRecord(f"sa-{n}", f"part{n}", f"look at part {n}", status="completed")
    return SubagentResult(record, f"part {n} holds the file report-{n}.md")


def _run(limit: list[SpendLimitReached | None], steps) -> tuple[Session, list[str]]:
    session, shown = Session(), []
    reports = ReportTurns(
        session,
        lambda e: shown.append(e.text) if isinstance(e, Notice) else None,
        spend=lambda: limit[0],
        session="cli:direct",
    )

    async def go() -> None:
        await steps(reports)
        await reports.wait(5)

    asyncio.run(go())
    return session, [t for t in shown if "started" not in t and "completed" not in t]


def test_reports_queued_past_the_limit_are_kept_and_told_once_with_their_count():
    async def steps(reports: ReportTurns) -> None:
        for n in (1, 2, 3):
            reports.started(_result(n).record)
        for n in (1, 2, 3):
            reports.ended(_result(n))

    session, shown = _run([LIMIT], steps)
    assert session.sent == []  # no report turn reached the model
    assert len(shown) == 1 and "3 helpers' reports were not handled" in shown[0]
    assert shown[0].startswith(LIMIT.message) and "nanobot session show cli:direct" in shown[0]
    assert "still running" not in shown[0]
    kept = "\n".join(str(m["content"]) for m in session.kept)
    for n in (1, 2, 3):  # each report whole, for the model's next request and `session show`
        assert f"part {n} holds the file report-{n}.md" in kept
    assert all(m[NOTE_KEY]["held"] == LIMIT.message for m in session.kept)


def test_a_helper_still_running_is_counted_and_a_raised_limit_lets_reports_run_again():
    limit: list[SpendLimitReached | None] = [LIMIT]

    async def steps(reports: ReportTurns) -> None:
        for n in (1, 2, 3):
            reports.started(_result(n).record)
        reports.ended(_result(1))
        await reports.wait(5)
        reports.ended(_result(2))  # held too, silently: the line said it would be
        await reports.wait(5)
        limit[0] = None  # raised in the config
        reports.ended(_result(3))

    session, shown = _run(limit, steps)
    assert len(shown) == 1
    assert "subagent 'part1' (sa-1) was not handled" in shown[0]
    assert "the reports of the 2 helpers still running will be kept the same way" in shown[0]
    assert [m["content"] for m in session.sent] == [_result(3).report_message()["content"]]
    assert sum(bool(m[NOTE_KEY].get("held")) for m in session.kept) == 2
