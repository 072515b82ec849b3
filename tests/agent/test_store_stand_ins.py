"""The stores stand behind small Protocols: in-memory stand-ins (checked by mypy: this module is in
its `files`) run real turns through Conversation, consolidation and the cron tool against the fake
LLM server, and nothing reaches the session files, MEMORY.md, HISTORY.md or the cron folder."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from nanobot.agent.budget import ContextBudget
from nanobot.agent.consolidation import Consolidator
from nanobot.agent.context import ContextBuilder
from nanobot.agent.conversation import Conversation
from nanobot.agent.loop import LoopSpec
from nanobot.agent.upkeep import MemoryUpkeep
from nanobot.cron.jobs import Job
from nanobot.cron.protocols import JobStoreLike
from nanobot.cron.schedule import Schedule
from nanobot.errors import UnknownSessionError
from nanobot.fakellm import FakeLLMServer, Reply
from nanobot.memory.protocols import ConsolidationMemory
from nanobot.memory.store import MemoryState, UpdateOutcome
from nanobot.messages import Message
from nanobot.providers.openai_compat import OpenAICompatProvider
from nanobot.session.protocols import SessionStoreLike, WorkingStateWriter
from nanobot.session.store import Session
from nanobot.session.working_state import Version, WorkingState, count_items
from nanobot.tools.approval import ApprovalRequest, Decision
from nanobot.tools.base import ToolContext
from nanobot.tools.cron import CronTool
from nanobot.tools.registry import ToolRegistry


class InMemoryWorkingState:
    """One session's working-state log as a list of what was handed to it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def add_version(self, text: str, *, archived: int) -> Version:
        number = sum(1 for c in self.calls if c[0] == "version") + 1
        self.calls.append(("version", text, archived))
        return Version(number, "2026-01-01T00:00:00Z", text, count_items(text), archived)

    def record_compaction(
        self, *, ok: bool, archived: int, reason: str = "", items: int = 0
    ) -> None:
        self.calls.append(("compaction", ok, archived, reason, items))

    def close_for_new(self) -> None:
        self.calls.append(("new",))

    def read(self) -> WorkingState:
        """What /status shows: the versions handed over, the last one in force (none after /new)."""
        versions: list[Version] = []
        current: Version | None = None
        for call in self.calls:
            if call[0] == "version":
                current = Version(len(versions) + 1, "2026-01-01T00:00:00Z", call[1], 0, call[2])
                versions.append(current)
            elif call[0] == "new":
                current = None
        return WorkingState(versions=versions, current=current)


class InMemorySessions:
    """Sessions in a dict: what SessionStoreLike asks, nothing on disk."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder  # only names the sessions' paths: nothing is written there
        self.sessions: dict[str, Session] = {}
        self.held: set[str] = set()
        self.states: dict[str, InMemoryWorkingState] = {}

    def exists(self, key: str) -> bool:
        return key in self.sessions

    def load(self, key: str) -> Session:
        if key not in self.sessions:
            raise UnknownSessionError(f"no session named {key!r}")
        return self.sessions[key]

    def open(self, key: str) -> Session:
        self.held.add(key)
        return self.sessions.setdefault(key, Session(key=key, path=self.folder / f"{key}.jsonl"))

    def close(self, session: Session) -> None:
        self.held.discard(session.key)

    def append(self, session: Session, messages: list[Message]) -> None:
        assert session.key in self.held
        session.messages.extend(messages)

    def set_pointer(self, session: Session, last_consolidated: int) -> None:
        assert 0 <= last_consolidated <= len(session.messages)
        session.last_consolidated = last_consolidated

    def clear(self, session: Session) -> None:
        session.messages, session.last_consolidated = [], 0

    def record_decision(self, session: Session, **fields: Any) -> dict[str, Any]:
        session.decisions.append(fields)
        return fields

    def working_state_log(self, session: Session) -> WorkingStateWriter:
        return self.states.setdefault(session.key, InMemoryWorkingState())

    def working_state_for(self, key: str) -> InMemoryWorkingState:
        return self.states.setdefault(key, InMemoryWorkingState())


class InMemoryMemory:
    """MEMORY.md and HISTORY.md as two strings."""

    def __init__(self, memory: str) -> None:
        self.memory = memory
        self.history = ""

    def read_memory(self) -> str:
        return self.memory

    def state(self) -> MemoryState:
        return MemoryState(self.memory, None, self.memory)

    def history_tail(self, max_bytes: int) -> str:
        return self.history[-max_bytes:]

    def append_raw_archive(self, messages: list[Message], reason: str, *, marker: str = "") -> str:
        first = f"[RAW] {len(messages)} message(s) — {reason}"
        self.history += f"{first}\n{marker}\n\n"
        return first

    def record_consolidation(
        self,
        history_entry: str,
        memory_update: str | None,
        *,
        truncated: bool,
        base: str | None,
        when: datetime | None = None,
    ) -> tuple[str, UpdateOutcome]:
        self.history += history_entry.strip() + "\n\n"
        self.memory = memory_update or self.memory
        return history_entry.splitlines()[0], UpdateOutcome("written", "MEMORY.md updated")


class InMemoryJobs:
    def __init__(self) -> None:
        self.notices: list[str] = []
        self.saved: list[Job] = []

    def jobs(self) -> list[Job]:
        return list(self.saved)

    def add(
        self,
        schedule: Schedule,
        message: str,
        *,
        now_ms: int,
        name: str | None = None,
        session: str | None = None,
        missed: str = "run_once",
        channel: str | None = None,
        to: str | None = None,
        pending_approval: bool = False,
    ) -> Job:
        job = Job(
            id=f"job{len(self.saved)}",
            name=name or message[:30],
            schedule=schedule,
            message=message,
            session=session,
            missed=missed,
            channel=channel,
            to=to,
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
            pending_approval=pending_approval,
        )
        self.saved.append(job)
        return job

    def remove(self, job_id: str) -> Job:
        job = next(j for j in self.saved if j.id == job_id)
        self.saved.remove(job)
        return job


class Yes:
    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision(True, by_person=True)


def _conversation(
    workspace: Path,
    sessions: SessionStoreLike,
    memory: ConsolidationMemory,
    fake_llm: FakeLLMServer,
    tools: ToolRegistry,
) -> tuple[Conversation, OpenAICompatProvider]:
    """A conversation in session "cli:stand-in" wired to the given stores, talking to the fake LLM."""
    provider = OpenAICompatProvider(
        "test-model", name="custom", api_key="sk-test-key-123456", api_base=fake_llm.openai_base_url
    )
    budget = ContextBudget(window=32_000, max_tokens=1000)
    context = ContextBuilder(workspace, memory=memory)
    session = sessions.open("cli:stand-in")
    conversation = Conversation(
        session=session,
        store=sessions,
        context=context,
        loop=LoopSpec(provider, tools, budget, stream=False),
        upkeep=MemoryUpkeep(
            Consolidator(provider, memory, sessions, budget), session, context, tools
        ),
    )
    return conversation, provider


def test_a_turn_runs_and_is_consolidated_through_in_memory_stores(
    tmp_path: Path, isolated_home: Path, fake_llm: FakeLLMServer
) -> None:
    sessions: SessionStoreLike = InMemorySessions(tmp_path / "state")
    memory: ConsolidationMemory = InMemoryMemory(
        "# Memory\n\n- The user is Ana; she lives in Porto.\n"
    )
    jobs: JobStoreLike = InMemoryJobs()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tools = ToolRegistry([CronTool(ToolContext(workspace=workspace, approver=Yes()), jobs)])
    conversation, provider = _conversation(workspace, sessions, memory, fake_llm, tools)
    fake_llm.summarise = (
        True  # consolidation requests get a save_memory call built from what they carry
    )
    fake_llm.script(
        Reply.tool_calls(
            [("cron", {"action": "add", "message": "water the tomatoes", "every_seconds": 86400})]
        ),
        Reply.text("Done, Ana: a daily reminder to water the tomatoes."),
        Reply.text("You live in Porto."),
    )

    async def talk() -> None:
        try:
            await conversation.send("remind me daily to water the tomatoes")
            await conversation.send("where do I live?")
            await conversation.compact()
        finally:
            await conversation.upkeep.close(5)
            await provider.aclose()

    asyncio.run(talk())
    turn = fake_llm.requests[0]
    assert (
        "she lives in Porto" in turn.messages[0]["content"]
    )  # the stand-in's MEMORY.md reached the model
    stored = sessions.load("cli:stand-in")
    assert [m["role"] for m in stored.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert stored.messages[-1]["content"] == "You live in Porto."
    assert [j.message for j in jobs.jobs()] == [
        "water the tomatoes"
    ]  # the tool wrote through the stand-in
    assert (
        stored.last_consolidated == 4
    )  # /compact kept the last exchange; the pointer moved in the stand-in
    assert isinstance(memory, InMemoryMemory) and "water the tomatoes" in memory.history
    fake_llm.assert_all_valid()
    written = [p.relative_to(isolated_home) for p in isolated_home.rglob("*") if p.is_file()]
    assert not any(p.parts[0] in ("sessions", "cron") for p in written), written
    assert not any(p.name in ("MEMORY.md", "HISTORY.md") for p in (workspace.rglob("*"))), list(
        workspace.rglob("*")
    )


def test_consolidation_and_new_write_the_working_state_through_the_stand_in(
    tmp_path: Path, isolated_home: Path, fake_llm: FakeLLMServer
) -> None:
    sessions = InMemorySessions(tmp_path / "state")
    memory = InMemoryMemory("# Memory\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    conversation, provider = _conversation(workspace, sessions, memory, fake_llm, ToolRegistry([]))
    fake_llm.summarise = True  # the checkpoint is built from the goal and ticket the user names
    fake_llm.script(Reply.text("Noted."), Reply.text("On it."))

    async def talk() -> None:
        try:
            await conversation.send("Goal: ship ABC-123 by Friday.")
            await conversation.send("Decision: use Postgres.")
            await conversation.compact()
            await conversation.new_session()
            fake_llm.script(Reply.text("Fresh start."))  # scripted replies come before summaries
            await conversation.send("hello again")
        finally:
            await conversation.upkeep.close(5)
            await provider.aclose()

    asyncio.run(talk())
    calls = sessions.states["cli:stand-in"].calls
    # /compact: a version with the first exchange's goal and ticket (2 messages archived), then
    # the outcome; /new: a version with the last exchange too, its outcome, then the close
    assert [c[0] for c in calls] == ["version", "compaction", "version", "compaction", "new"]
    first, second = calls[0], calls[2]
    assert "ship ABC-123" in first[1] and first[2] == 2
    assert "ship ABC-123" in second[1] and "use Postgres" in second[1] and second[2] == 2
    assert calls[1] == ("compaction", True, 2, "", count_items(first[1]))
    assert calls[3] == ("compaction", True, 2, "", count_items(second[1]))
    # after /new the session starts empty, and the next request carries no working state
    stored = sessions.load("cli:stand-in")
    assert stored.working_state == "" and [m["content"] for m in stored.messages] == [
        "hello again",
        "Fresh start.",
    ]
    assert len(fake_llm.requests) == 5  # two turns, two summaries (no retry), one turn
    last = fake_llm.requests[-1]
    assert "ABC-123" not in json.dumps(last.messages)
    fake_llm.assert_all_valid()
    assert not (tmp_path / "state").exists()  # nothing reached a working-state file
    written = [p.relative_to(isolated_home) for p in isolated_home.rglob("*") if p.is_file()]
    assert not any(p.parts[0] == "sessions" for p in written), written
