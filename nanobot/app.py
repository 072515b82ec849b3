"""The one place that wires concrete classes together from a Config."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nanobot.agent.budget import BudgetSnapshot, ContextBudget
from nanobot.agent.consolidation import Consolidator, probe_message
from nanobot.agent.context import ContextBuilder
from nanobot.agent.conversation import Conversation, TurnSettings
from nanobot.agent.events import EventSink, Notice, ignore
from nanobot.agent.loop import LoopSpec
from nanobot.agent.reports import ReportTurns
from nanobot.agent.subagents import SubagentManager
from nanobot.agent.upkeep import MemoryUpkeep
from nanobot.approvals import SessionApprover, check_kinds
from nanobot.config import Config, resolve_fallbacks, resolve_model
from nanobot.errors import ContextTooSmallError
from nanobot.memory.history import history_receipts
from nanobot.memory.store import MemoryStore
from nanobot.paths import secure_home
from nanobot.providers.base import Provider
from nanobot.providers.factory import make_provider
from nanobot.providers.fallback import FallbackCallback
from nanobot.providers.registry import secret_env_names
from nanobot.providers.retry import RetryCallback, RetryPolicy
from nanobot.sandbox import Confinement, choose, prefetch
from nanobot.session.importer import ImportResult, continuing_line, import_all
from nanobot.session.store import SessionStore
from nanobot.tokens import default_counter
from nanobot.tools.approval import Approver, RefuseApprover
from nanobot.tools.base import ToolContext
from nanobot.tools.exec_rules import ExecRules
from nanobot.tools.registry import ToolRegistry
from nanobot.tools.spawn import Spawner, SpawnTool

if TYPE_CHECKING:  # imported where used: the cron and MCP modules load only when needed
    from nanobot.cron.runner import Clock, Delivery, JobTurns, Scheduler, TurnResult
    from nanobot.mcp.manager import MCPManager
    from nanobot.tools.cron import CronTool

def exec_rules(cfg: Config) -> ExecRules:
    ex = cfg.tools.exec
    return ExecRules.from_lists(allow=ex.allow, ask=ex.ask, deny=ex.deny, legacy_allow=ex.allow_patterns,
                                legacy_deny=ex.deny_patterns, network=ex.network,
                                unconfined_ok=ex.confinement == "none" or ex.allow_unconfined)


def confinement(cfg: Config) -> Confinement:
    """What exec runs under with this config; status screens and the exec tool ask this."""
    return choose(cfg.tools.exec.confinement)


def tool_context(cfg: Config, workspace: Path, approver: Approver | None = None) -> ToolContext:
    secrets = set(secret_env_names())
    secrets |= {name for name, value in os.environ.items() if value and value in cfg.secret_values()}
    return ToolContext(
        workspace=workspace,
        restrict_to_workspace=cfg.tools.restrict_to_workspace,
        exec_enabled=cfg.tools.exec.enable,
        exec_timeout=float(cfg.tools.exec.timeout),
        secret_env_names=frozenset(secrets),
        confinement=confinement(cfg),
        exec_rules=exec_rules(cfg),
        approver=approver if approver is not None else RefuseApprover(),
    )


def build_tools(cfg: Config, workspace: Path, approver: Approver | None = None) -> ToolRegistry:
    """The tools a subagent gets; the main agent gets these plus spawn (see open_assistant)."""
    from nanobot.tools.files import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool
    from nanobot.tools.recall import SearchHistoryTool
    from nanobot.tools.shell import ExecTool
    from nanobot.tools.web import WebFetchTool, WebSearchTool

    ctx = tool_context(cfg, workspace, approver)
    registry = ToolRegistry([ReadFileTool(ctx), WriteFileTool(ctx), EditFileTool(ctx), ListDirTool(ctx),
                             SearchHistoryTool(ctx)])
    if cfg.tools.exec.enable:
        registry.register(ExecTool(ctx))
    registry.register(WebSearchTool(ctx, api_key=cfg.tools.web.search.api_key or None))
    registry.register(WebFetchTool(ctx))
    return registry


def build_provider(cfg: Config, model: str | None = None, *, on_retry: RetryCallback | None = None,
                   policy: RetryPolicy | None = None, on_fallback: FallbackCallback | None = None) -> Provider:
    """The model's provider; agents.defaults.fallbackModels follow it unless --model named another."""
    fallbacks = resolve_fallbacks(cfg) if model is None else []
    return make_provider(resolve_model(cfg, model), policy=policy or retry_policy_from_env(), on_retry=on_retry,
                         fallbacks=fallbacks, on_fallback=on_fallback)


def retry_policy_from_env() -> RetryPolicy:
    """NANOBOT_RETRY_BASE_DELAY shortens backoff (tests and scripts use it)."""
    policy = RetryPolicy()
    raw = os.environ.get("NANOBOT_RETRY_BASE_DELAY")
    if raw:
        try:
            policy.base_delay = max(0.0, float(raw))
        except ValueError:
            pass
    return policy


def start_mcp(cfg: Config, workspace: Path, registries: list[ToolRegistry], approver: Approver | None = None, *,
              notify: Callable[[str], None] | None = None) -> MCPManager | None:
    """Start tools.mcpServers in the background; their tools join `registries` (main and subagents)
    and ask `approver` before each call to a server that is not trusted."""
    if not cfg.tools.mcp_servers:
        return None
    from nanobot.mcp.manager import MCPManager

    manager = MCPManager(cfg.tools.mcp_servers, workspace, tool_context(cfg, workspace, approver), notify)
    manager.start(registries)
    return manager


def build_context(cfg: Config, workspace: Path, memory: MemoryStore | None = None) -> ContextBuilder:
    """The prompt's builder, reading MEMORY.md through `memory` (a new store on `workspace` by default)."""
    from nanobot.skills import SkillSet

    return ContextBuilder(workspace, memory=memory or MemoryStore(workspace), skills=SkillSet.discover(workspace),
                          timezone=cfg.defaults.timezone)


def cron_tool(cfg: Config, workspace: Path, session_key: str, approver: Approver | None = None) -> CronTool:
    from nanobot.cron.store import JobStore
    from nanobot.tools.cron import CronTool

    return CronTool(tool_context(cfg, workspace, approver), JobStore(workspace), default_tz=cfg.defaults.timezone,
                    origin=session_key)


class AssistantTurns:
    """Runs a job's turn (nanobot/cron/runner.py) in a freshly opened session, then closes it."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    async def run(self, session_key: str, prompt: str) -> TurnResult:
        from nanobot.cron.runner import TurnResult

        assistant = open_assistant(self.cfg, session_key, stream=False)  # SessionInUseError when held
        try:
            await assistant.mcp_ready()  # a job's turn sees the MCP tools too
            outcome = await assistant.conversation.send(prompt)
            if assistant.subagents.running():
                await assistant.subagents.wait(self.cfg.defaults.subagent_wait_seconds)
        finally:
            await assistant.aclose()
        return TurnResult(outcome.content, outcome.error)


def build_scheduler(cfg: Config, *, kind: str, heartbeat: bool = False, turns: JobTurns | None = None,
                    deliveries: list[Delivery] | None = None, clock: Clock | None = None) -> Scheduler:
    """The job runner for `nanobot serve`, a chat ("chat") or `nanobot cron run`; only serve beats."""
    from nanobot.cron.runner import HeartbeatSettings, RunnerLock, Scheduler, SystemClock
    from nanobot.cron.store import JobStore

    store = JobStore(cfg.workspace_path())
    hb = cfg.gateway.heartbeat
    return Scheduler(store, turns or AssistantTurns(cfg), RunnerLock(store, kind), clock or SystemClock(),
                     list(deliveries or []), HeartbeatSettings(hb.enabled and heartbeat, hb.interval_s),
                     poll_s=cfg.gateway.jobs_poll_s)


@dataclass
class Assistant:
    """Everything one `nanobot agent` run holds open."""

    cfg: Config
    workspace: Path
    store: SessionStore
    conversation: Conversation
    subagents: SubagentManager  # this run's helpers, and the report turns they lead to
    approver: SessionApprover | None = None  # answers risky actions; remembers this session's "always"
    imports: ImportResult = field(default_factory=lambda: ImportResult([], []))  # what came from nanobot
    mcp: MCPManager | None = None  # MCP servers starting or started in the background
    warnings: list[str] = field(default_factory=list)  # for the user at start-up (damaged memory files, ...)
    # the prompt's size against the window, a read-only workspace: at every chat start, but once per
    # text in one-shot mode (a script's every call need not repeat them)
    once_warnings: list[str] = field(default_factory=list)

    async def mcp_ready(self) -> None:
        """Wait for MCP servers still starting (a turn calls this, never the prompt)."""
        if self.mcp is not None:
            await self.mcp.wait_ready()

    def startup_notes(self) -> list[str]:
        """Lines the chat shows before its first prompt: what was imported from nanobot."""
        session = self.conversation.session
        key = session.key
        line = continuing_line(key, len(session.messages))
        lines = [line] if line else []
        lines += [f"imported from nanobot: {r.describe()}" for r in self.imports.imported
                  if not (r.kind == "session" and r.key == key)]
        lines += [f"not imported from nanobot: {note}" for note in self.imports.kept]
        return lines

    def prewarm(self) -> None:
        """Start loading the provider's SDK in the background (the REPL calls this before its prompt)."""
        self.conversation.provider.prewarm()

    async def aclose(self) -> None:
        await self.subagents.stop()
        if self.mcp is not None:
            await self.mcp.aclose()
        await self.conversation.upkeep.join()  # `agent -m` must not exit mid-consolidation
        self.store.close(self.conversation.session)
        await self.conversation.provider.aclose()


class _NoSpawner:
    """Stands in for the helpers where only the tools' schemas are wanted (status)."""

    def spawn(self, task: str, label: str | None = None) -> tuple[str, str]:
        raise RuntimeError("nanobot status starts no helpers")


def add_main_agent_tools(tools: ToolRegistry, cfg: Config, workspace: Path, session_key: str,
                         subagents: Spawner, approver: Approver | None = None) -> None:
    """What the main agent has beyond a subagent's tools (spawn, cron); status counts the same schemas."""
    tools.register(SpawnTool(tool_context(cfg, workspace, approver), subagents))
    tools.register(cron_tool(cfg, workspace, session_key, approver))


def build_budget(cfg: Config) -> ContextBudget:
    """The one ContextBudget of a run: every request, subagent and status screen asks it."""
    d = cfg.defaults
    return ContextBudget(window=d.context_window_tokens, max_tokens=d.max_tokens, counter=default_counter(),
                         prompt_cap=d.context_block_limit, max_tool_calls=d.max_tool_calls_per_step)


def open_assistant(cfg: Config, session_key: str, *, model: str | None = None, stream: bool = True,
                   on_retry: RetryCallback | None = None, ask: Approver | None = None,
                   approve: Iterable[str] = (), on_fallback: FallbackCallback | None = None,
                   background: EventSink = ignore) -> Assistant:
    """Resolve the provider (fails fast on a missing key), then lock and load the session.

    `ask` answers risky actions (the chat's prompt; None refuses them, as in one-shot mode);
    `approve` lists kinds allowed without asking (--approve), besides tools.autoApprove;
    `background` renders what happens between the user's turns (helpers' reports, consolidation
    finishing, MCP servers failing).
    """
    auto = check_kinds([*cfg.tools.auto_approve], "tools.autoApprove") | check_kinds(approve, "--approve")
    provider = build_provider(cfg, model, on_retry=on_retry, on_fallback=on_fallback)
    if cfg.tools.exec.enable:
        prefetch(cfg.tools.exec.confinement)  # its probes wait on child processes while the session loads
    workspace = cfg.workspace_path()
    workspace.mkdir(parents=True, exist_ok=True)
    secure_home(keep_open=workspace)
    store = SessionStore(receipts=history_receipts(workspace))
    imports = import_all(workspace, store=store)  # nanobot's own sessions and history, on first use
    session = store.open(session_key)
    d = cfg.defaults
    channel, _, chat_id = session_key.partition(":")
    approver = SessionApprover(ask, auto=auto,
                               record=lambda **fields: store.record_decision(session, **fields))
    memory = MemoryStore(workspace)
    context = build_context(cfg, workspace, memory)
    budget = build_budget(cfg)
    # in one pass, each object built from the ones before it: the conversation runs turns (its
    # upkeep consolidates around them); report turns bring it what helpers found; the helpers tell
    # the report turns when they end; the main agent's spawn tool starts helpers (registered
    # last, in the registry the loop holds)
    tools = build_tools(cfg, workspace, approver)
    loop = LoopSpec(provider, tools, budget, max_iterations=d.max_tool_iterations, temperature=d.temperature,
                    stream=stream)
    consolidator = Consolidator(provider, memory, store, budget, timeout=d.consolidation_timeout_seconds)
    conversation = Conversation(
        session=session, store=store, context=context, loop=loop,
        upkeep=MemoryUpkeep(consolidator, session, context, tools, background=background,
                            room_wait_seconds=d.consolidation_wait_seconds),
        settings=TurnSettings(channel=channel or "cli", chat_id=chat_id or "direct"))
    sub_tools = build_tools(cfg, workspace, approver)  # subagents ask the same way, recorded in this session
    subagents = SubagentManager(provider, sub_tools, workspace, reports=ReportTurns(conversation, background),
                                budget=budget)
    add_main_agent_tools(tools, cfg, workspace, session_key, subagents, approver)
    system = context.system_prompt()
    try:
        memory_cut = fit_memory(context, budget, tools.schemas(), memory)
        system = context.system_prompt() if memory_cut else system
        budget.check_fixed(system, tools.schemas(),
                           memory_tokens=lambda: budget.counter.count_text(memory.read_memory()))
    except ContextTooSmallError:
        store.close(session)
        raise
    warnings = [*session.warnings, *memory.startup_check()]
    # a cut MEMORY.md already says the prompt is full
    read_only = memory.read_only_notice()
    once_warnings = [*([read_only] if read_only else []), *(memory_cut or budget.startup_warnings(system, tools.schemas()))]
    mcp = start_mcp(cfg, workspace, [tools, sub_tools], approver,  # last: nothing after it can fail and leak them
                    notify=lambda text: background(Notice(text, "warning")))
    return Assistant(cfg, workspace, store, conversation, subagents, approver, imports, mcp, warnings, once_warnings)


def fit_memory(context: ContextBuilder, budget: ContextBudget, schemas: list[dict], memory: MemoryStore) -> list[str]:
    """When the whole MEMORY.md would leave no room for a conversation, requests carry its head
    (cut for the request, never on disk): the one line that says so, or nothing."""
    try:
        budget.check_fixed(context.system_prompt(), schemas)
        return []
    except ContextTooSmallError:
        pass
    context.memory_room = 0
    room = budget.memory_room(context.system_prompt(), schemas)
    text = memory.read_memory()
    if room <= 0 or not text.strip():
        context.memory_room = None
        return []  # MEMORY.md is not what is too large: check_fixed says what is
    context.memory_room = room
    return [f"MEMORY.md ({len(text.encode('utf-8')):,} bytes) is larger than this model's context window allows: "
            f"each request carries its first {room:,} bytes (the file on disk is whole); shorten it with "
            "`nanobot memory edit`"]


def status_snapshot(cfg: Config, session_key: str = "cli:direct") -> tuple[BudgetSnapshot, bool]:
    """What `nanobot status` shows: the budget the next request of `session_key` would be fitted with
    (built exactly as `open_assistant` builds it), and whether that session exists yet."""
    workspace = cfg.workspace_path()
    budget = build_budget(cfg)
    context = build_context(cfg, workspace)
    tools = build_tools(cfg, workspace)
    add_main_agent_tools(tools, cfg, workspace, session_key, _NoSpawner())  # schemas only: nothing is run
    store = SessionStore(receipts=history_receipts(workspace))
    session = store.load(session_key) if store.exists(session_key) else None
    snap = budget.snapshot(session, system_prompt=context.system_prompt, tools=tools.schemas(), probe=probe_message())
    return snap, session is not None
