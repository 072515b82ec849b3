"""The one place that wires concrete classes together from a Config."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nanobot.agent.budget import BudgetSnapshot, ContextBudget, WindowGuard
from nanobot.agent.consolidation import Consolidator, probe_message
from nanobot.agent.context import ContextBuilder
from nanobot.agent.conversation import Conversation, TurnSettings
from nanobot.agent.events import EventSink, Notice, ignore
from nanobot.agent.loop import LoopSpec
from nanobot.agent.reports import ReportTurns
from nanobot.agent.subagents import SubagentManager
from nanobot.agent.upkeep import MemoryUpkeep
from nanobot.approvals import SessionApprover, check_kinds
from nanobot.config import Config, ResolvedModel, resolve_fallbacks, resolve_model
from nanobot.errors import ContextTooSmallError
from nanobot.memory.store import MemoryStore
from nanobot.paths import secure_home
from nanobot.policy.egress import EgressPolicy
from nanobot.provider_table import secret_env_names
from nanobot.providers.base import Provider
from nanobot.providers.factory import make_provider
from nanobot.providers.fallback import FallbackCallback
from nanobot.providers.retry import RetryCallback, RetryPolicy
from nanobot.sandbox import Confinement, choose, prefetch
from nanobot.session.importer import ImportResult, continuing_line, import_all
from nanobot.session.protocols import SessionStoreLike
from nanobot.stores import job_store, memory_store, session_store
from nanobot.tokens import default_counter
from nanobot.tools.approval import Approver, RefuseApprover
from nanobot.tools.base import ToolContext
from nanobot.tools.exec_rules import ExecRules
from nanobot.tools.registry import ToolRegistry
from nanobot.tools.spawn import Spawner, SpawnTool
from nanobot.usage.meter import MeteredProvider, UsageMeter, shared_meter

if TYPE_CHECKING:  # imported where used: the cron and MCP modules load only when needed
    from nanobot.cron.runner import Clock, Delivery, JobTurns, Scheduler, TurnResult
    from nanobot.mcp.manager import MCPManager
    from nanobot.tools.cron import CronTool


def exec_rules(cfg: Config) -> ExecRules:
    ex = cfg.tools.exec
    return ExecRules.from_lists(
        allow=ex.allow,
        ask=ex.ask,
        deny=ex.deny,
        legacy_allow=ex.allow_patterns,
        legacy_deny=ex.deny_patterns,
        network=ex.network,
        unconfined_ok=ex.confinement == "none" or ex.allow_unconfined,
    )


def confinement(cfg: Config) -> Confinement:
    """What exec runs under with this config; status screens and the exec tool ask this."""
    return choose(cfg.tools.exec.confinement)


def tool_context(
    cfg: Config,
    workspace: Path,
    approver: Approver | None = None,
    egress: EgressPolicy | None = None,
) -> ToolContext:
    secrets = set(secret_env_names())
    configured = cfg.secret_values()
    secrets |= {name for name, value in os.environ.items() if value and value in configured}
    return ToolContext(
        workspace=workspace,
        restrict_to_workspace=cfg.tools.restrict_to_workspace,
        exec_enabled=cfg.tools.exec.enable,
        exec_timeout=float(cfg.tools.exec.timeout),
        secret_env_names=frozenset(secrets),
        confinement=confinement(cfg),
        exec_rules=exec_rules(cfg),
        approver=approver if approver is not None else RefuseApprover(),
        egress=egress
        if egress is not None
        else EgressPolicy.from_config(cfg.tools.web.allow_domains),
    )


def build_tools(
    cfg: Config,
    workspace: Path,
    approver: Approver | None = None,
    session_key: str | None = None,
    egress: EgressPolicy | None = None,
) -> ToolRegistry:
    """The tools a subagent gets; the main agent gets these plus spawn (see open_assistant).
    `session_key`: the session they work for (recall labels other sessions' messages by it);
    `egress`: the session's domain approvals, shared with the conversation that notes the user's domains."""
    from nanobot.tools.files import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool
    from nanobot.tools.recall import ReadHistoryTool, SearchHistoryTool
    from nanobot.tools.shell import ExecTool
    from nanobot.tools.web import WebFetchTool, WebSearchTool

    ctx = tool_context(cfg, workspace, approver, egress)
    scope = cfg.tools.recall.scope
    registry = ToolRegistry(
        [
            ReadFileTool(ctx),
            WriteFileTool(ctx),
            EditFileTool(ctx),
            ListDirTool(ctx),
            SearchHistoryTool(ctx, session_key=session_key, scope=scope),
            ReadHistoryTool(ctx, session_key=session_key, scope=scope),
        ]
    )
    if cfg.tools.exec.enable:
        registry.register(ExecTool(ctx))
    search = cfg.tools.web.search
    registry.register(
        WebSearchTool(
            ctx,
            api_key=search.api_key or None,
            provider=search.provider,
            max_results=search.max_results,
        )
    )
    registry.register(WebFetchTool(ctx))
    return registry


def build_provider(
    cfg: Config,
    model: str | None = None,
    *,
    on_retry: RetryCallback | None = None,
    policy: RetryPolicy | None = None,
    on_fallback: FallbackCallback | None = None,
    budget: ContextBudget | None = None,
) -> Provider:
    """The model's provider; agents.defaults.fallbackModels follow it unless --model named another.
    Every request it sends passes `budget`'s last check (a budget of its own when None: agent/budget.py),
    and a fallback with its own context window also that window's."""
    fallbacks = resolve_fallbacks(cfg) if model is None else []
    guard = budget or build_budget(cfg, model)

    def own_window(inner: Provider, fallback: ResolvedModel) -> Provider:
        reply = fallback.max_tokens or cfg.defaults.max_tokens
        return WindowGuard(inner, guard.for_window(fallback.context_window, reply))

    provider = make_provider(
        resolve_model(cfg, model),
        policy=policy or retry_policy_from_env(),
        on_retry=on_retry,
        fallbacks=fallbacks,
        on_fallback=on_fallback,
        own_window=own_window,
    )
    return WindowGuard(provider, guard)


def metered_provider(
    cfg: Config,
    session_key: str,
    source: str,
    model: str | None = None,
    *,
    on_retry: RetryCallback | None = None,
    on_fallback: FallbackCallback | None = None,
    budget: ContextBudget | None = None,
) -> MeteredProvider:
    """build_provider behind the usage meter: every call checked against usage.limits first and recorded in
    the ledger as `source` for `session_key`. Whatever calls a model goes through one of these
    (`for_source` gives the same provider under another source)."""
    return MeteredProvider(
        build_provider(cfg, model, on_retry=on_retry, on_fallback=on_fallback, budget=budget),
        shared_meter(cfg),
        source=source,
        session=session_key,
        model=model_label(cfg, model),
    )


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


def start_mcp(
    cfg: Config,
    workspace: Path,
    registries: list[ToolRegistry],
    approver: Approver | None = None,
    *,
    notify: Callable[[str], None] | None = None,
) -> MCPManager | None:
    """Start tools.mcpServers in the background; their tools join `registries` (main and subagents)
    and ask `approver` before each call to a server that is not trusted."""
    if not cfg.tools.mcp_servers:
        return None
    from nanobot.mcp.manager import MCPManager

    manager = MCPManager(
        cfg.tools.mcp_servers, workspace, tool_context(cfg, workspace, approver), notify
    )
    manager.start(registries)
    return manager


def build_context(
    cfg: Config, workspace: Path, memory: MemoryStore | None = None
) -> ContextBuilder:
    """The prompt's builder, reading MEMORY.md through `memory` (a new store on `workspace` by default)."""
    from nanobot.skills import SkillSet

    return ContextBuilder(
        workspace,
        memory=memory or memory_store(workspace),
        skills=SkillSet.discover(workspace),
        timezone=cfg.defaults.timezone,
    )


def cron_tool(
    cfg: Config, workspace: Path, session_key: str, approver: Approver | None = None
) -> CronTool:
    from nanobot.tools.cron import CronTool

    return CronTool(
        tool_context(cfg, workspace, approver),
        job_store(workspace),
        default_tz=cfg.defaults.timezone,
        origin=session_key,
    )


class AssistantTurns:
    """Runs a job's turn (nanobot/cron/runner.py) in a freshly opened session, then closes it."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    async def run(self, session_key: str, prompt: str) -> TurnResult:
        from nanobot.cron.runner import TurnResult

        assistant = open_assistant(
            self.cfg,
            session_key,
            stream=False,  # SessionInUseError when held
            memory_writes=background_memory_writes(self.cfg, session_key),
        )
        try:
            await assistant.mcp_ready()  # a job's turn sees the MCP tools too
            outcome = await assistant.conversation.send(prompt, by_user=False)
            if assistant.subagents.running():
                await assistant.subagents.wait(self.cfg.defaults.subagent_wait_seconds)
        finally:
            await assistant.aclose()
        return TurnResult(outcome.content, outcome.error)


def build_scheduler(
    cfg: Config,
    *,
    kind: str,
    heartbeat: bool = False,
    turns: JobTurns | None = None,
    deliveries: list[Delivery] | None = None,
    clock: Clock | None = None,
) -> Scheduler:
    """The job runner for `nanobot serve`, a chat ("chat") or `nanobot cron run`; only serve beats."""
    from nanobot.cron.runner import HeartbeatSettings, RunnerLock, Scheduler, SystemClock

    store = job_store(cfg.workspace_path())
    hb = cfg.gateway.heartbeat
    return Scheduler(
        store,
        turns or AssistantTurns(cfg),
        RunnerLock(store, kind),
        clock or SystemClock(),
        list(deliveries or []),
        HeartbeatSettings(hb.enabled and heartbeat, hb.interval_s),
        poll_s=cfg.gateway.jobs_poll_s,
        spend=shared_meter(cfg),
    )


@dataclass
class Assistant:
    """Everything one `nanobot agent` run holds open."""

    cfg: Config
    workspace: Path
    store: SessionStoreLike
    conversation: Conversation
    subagents: SubagentManager  # this run's helpers, and the report turns they lead to
    meter: UsageMeter  # the usage ledger and the limits every provider call of this run passes
    approver: SessionApprover | None = (
        None  # answers risky actions; remembers this session's "always"
    )
    imports: ImportResult = field(
        default_factory=lambda: ImportResult([], [])
    )  # what came from nanobot
    mcp: MCPManager | None = None  # MCP servers starting or started in the background
    warnings: list[str] = field(
        default_factory=list
    )  # for the user at start-up (damaged memory files, ...)
    budget: ContextBudget | None = (
        None  # its calibration is kept for the next run when this one closes
    )
    model_key: str = ""  # the model the calibration is kept under
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
        lines += [
            f"imported from nanobot: {r.describe()}"
            for r in self.imports.imported
            if not (r.kind == "session" and r.key == key)
        ]
        lines += [f"not imported from nanobot: {note}" for note in self.imports.kept]
        return lines

    def prewarm(self) -> None:
        """Start loading the provider's SDK in the background (the REPL calls this before its prompt)."""
        self.conversation.provider.prewarm()

    async def aclose(self) -> None:
        await self.subagents.stop()
        if self.mcp is not None:
            await self.mcp.aclose()
        # a consolidation still running gets a while to finish; what it leaves is done next run
        await self.conversation.upkeep.close(self.cfg.defaults.consolidation_exit_wait_seconds)
        if self.budget is not None:
            from nanobot.calibration_file import save_calibration

            save_calibration(self.model_key, self.budget.calibration)
        self.store.close(self.conversation.session)
        await self.conversation.provider.aclose()
        self.meter.close()

    def spend_line(self) -> str:
        """What this session's model calls spent today (the chat's /status)."""
        from nanobot.usage.report import session_line

        return session_line(self.conversation.session.key, directory=self.meter.dir)


class _NoSpawner:
    """Stands in for the helpers where only the tools' schemas are wanted (status)."""

    def spawn(self, task: str, label: str | None = None) -> tuple[str, str]:
        raise RuntimeError("nanobot status starts no helpers")


def add_main_agent_tools(
    tools: ToolRegistry,
    cfg: Config,
    workspace: Path,
    session_key: str,
    subagents: Spawner,
    approver: Approver | None = None,
) -> None:
    """What the main agent has beyond a subagent's tools (spawn, cron); status counts the same schemas."""
    tools.register(SpawnTool(tool_context(cfg, workspace, approver), subagents))
    tools.register(cron_tool(cfg, workspace, session_key, approver))


def model_label(cfg: Config, model: str | None = None) -> str:
    """provider/model as the ledger names it."""
    resolved = resolve_model(cfg, model)
    return resolved.label or f"{resolved.spec.name}/{resolved.model}"


def background_memory_writes(cfg: Config, session_key: str) -> bool:
    """Whether consolidating `session_key` may write MEMORY.md and HISTORY.md: always for the user's own
    sessions (a job aimed at one with --session included); for a job's own session (cron:<id>) or the
    heartbeat's, only when the job says "memory": true (gateway.heartbeat.memory for the heartbeat)."""
    from nanobot.cron.heartbeat import HEARTBEAT_SESSION
    from nanobot.cron.jobs import current_job

    job = current_job.get()
    if job is None or session_key not in (HEARTBEAT_SESSION, f"cron:{job}"):
        return True
    if job == "heartbeat":
        return cfg.gateway.heartbeat.memory
    try:
        return job_store(cfg.workspace_path()).get(job).memory
    except Exception:  # the job was removed meanwhile: the default
        return False


def build_budget(
    cfg: Config, model: str | None = None, *, warnings: list[str] | None = None
) -> ContextBudget:
    """The one ContextBudget of a run: every request, subagent and status screen asks it. It starts
    from what earlier runs learned of how the provider counts `model` (calibration_file.py; what it
    could not trust is said in `warnings`)."""
    from nanobot.calibration_file import load_calibration

    d = cfg.defaults
    return ContextBudget(
        window=d.context_window_tokens,
        max_tokens=d.max_tokens,
        counter=default_counter(),
        calibration=load_calibration(model or d.model, warnings=warnings),
        prompt_cap=d.context_block_limit,
        max_tool_calls=d.max_tool_calls_per_step,
        consolidate_above=d.consolidate_above_tokens,
    )


def open_assistant(
    cfg: Config,
    session_key: str,
    *,
    model: str | None = None,
    stream: bool = True,
    on_retry: RetryCallback | None = None,
    ask: Approver | None = None,
    approve: Iterable[str] = (),
    on_fallback: FallbackCallback | None = None,
    background: EventSink = ignore,
    origin: str = "chat",
    memory_writes: bool = True,
) -> Assistant:
    """Resolve the provider (fails fast on a missing key), then lock and load the session.

    `ask` answers risky actions (the chat's prompt; None refuses them, as in one-shot mode);
    `approve` lists kinds allowed without asking (--approve), besides tools.autoApprove;
    `background` renders what happens between the user's turns (helpers' reports, consolidation
    finishing, MCP servers failing); `origin` is the ledger's source for its turns ("chat",
    "one-shot"; within a cron job's turn the ledger says "cron"); `memory_writes` False keeps
    consolidation out of MEMORY.md and HISTORY.md (background sessions: see consolidator_for).
    """
    auto = check_kinds([*cfg.tools.auto_approve], "tools.autoApprove") | check_kinds(
        approve, "--approve"
    )
    calibration_warnings: list[str] = []
    budget = build_budget(cfg, model, warnings=calibration_warnings)
    provider = metered_provider(
        cfg, session_key, origin, model, on_retry=on_retry, on_fallback=on_fallback, budget=budget
    )
    meter = provider.meter
    if cfg.tools.exec.enable:
        prefetch(
            cfg.tools.exec.confinement
        )  # its probes wait on child processes while the session loads
    workspace = cfg.workspace_path()
    workspace.mkdir(parents=True, exist_ok=True)
    secure_home(keep_open=workspace)
    store = session_store(workspace)
    imports = import_all(workspace, store=store)  # nanobot's own sessions and history, on first use
    session = store.open(session_key)
    d = cfg.defaults
    # "cron:job-7" is channel cron; a key without one ("work", from `agent -s work`) is a CLI chat of
    # that name, as in nanobot (it told the model "Channel: work")
    channel, chat_id = session_key.split(":", 1) if ":" in session_key else ("cli", session_key)
    approver = SessionApprover(
        ask, auto=auto, record=lambda **fields: store.record_decision(session, **fields)
    )
    memory = memory_store(workspace)
    context = build_context(cfg, workspace, memory)
    # in one pass, each object built from the ones before it: the conversation runs turns (its
    # upkeep consolidates around them); report turns bring it what helpers found; the helpers tell
    # the report turns when they end; the main agent's spawn tool starts helpers (registered
    # last, in the registry the loop holds)
    egress = EgressPolicy.from_config(
        cfg.tools.web.allow_domains
    )  # one per session: main agent and helpers
    tools = build_tools(cfg, workspace, approver, session_key, egress)
    loop = LoopSpec(
        provider,
        tools,
        budget,
        max_iterations=d.max_tool_iterations,
        temperature=d.temperature,
        stream=stream,
    )
    consolidator = Consolidator(
        provider.for_source("consolidation"),
        memory,
        store,
        budget,
        timeout=d.consolidation_timeout_seconds,
        memory_writes=memory_writes,
    )
    conversation = Conversation(
        session=session,
        store=store,
        context=context,
        loop=loop,
        upkeep=MemoryUpkeep(
            consolidator,
            session,
            context,
            tools,
            background=background,
            room_wait_seconds=d.consolidation_wait_seconds,
        ),
        settings=TurnSettings(channel=channel or "cli", chat_id=chat_id or "direct"),
        egress=egress,
    )
    from nanobot.cron.jobs import current_job

    sub_tools = build_tools(
        cfg, workspace, approver, session_key, egress
    )  # subagents ask the same way
    subagents = SubagentManager(
        provider.for_source("subagent"),
        sub_tools,
        workspace,
        reports=ReportTurns(  # a report turn a daily limit forbids is held, and kept in the session
            conversation,
            background,
            spend=lambda: meter.refusal(current_job.get()),
            session=session_key,
        ),
        budget=budget,
        limits=cfg.usage.limits,
    )
    add_main_agent_tools(tools, cfg, workspace, session_key, subagents, approver)
    system = context.system_prompt()
    try:
        memory_cut = fit_memory(context, budget, tools.schemas(), memory, system)
        system = context.system_prompt() if memory_cut else system
        budget.check_fixed(
            system,
            tools.schemas(),
            memory_tokens=lambda: budget.counter.count_text(memory.read_memory()),
        )
    except ContextTooSmallError:
        store.close(session)
        raise
    warnings = [*session.warnings, *memory.startup_check(), *calibration_warnings]
    # a cut MEMORY.md already says the prompt is full
    read_only = memory.read_only_notice()
    once_warnings = [
        *([read_only] if read_only else []),
        *(memory_cut or budget.startup_warnings(system, tools.schemas())),
    ]
    mcp = start_mcp(
        cfg,
        workspace,
        [tools, sub_tools],
        approver,  # last: nothing after it can fail and leak them
        notify=lambda text: background(Notice(text, "warning")),
    )
    return Assistant(
        cfg,
        workspace,
        store,
        conversation,
        subagents,
        meter,
        approver,
        imports,
        mcp,
        warnings,
        budget=budget,
        model_key=model or d.model,
        once_warnings=once_warnings,
    )


def fit_memory(
    context: ContextBuilder,
    budget: ContextBudget,
    schemas: list[dict],
    memory: MemoryStore,
    system: str,
) -> list[str]:
    """When the whole MEMORY.md would leave no room for a conversation, requests carry its head
    (cut for the request, never on disk): the one line that says so, or nothing. `system` is the
    context's system prompt as it is now."""
    try:
        budget.check_fixed(system, schemas)
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
    return [
        f"MEMORY.md ({len(text.encode('utf-8')):,} bytes) is larger than this model's context window allows: "
        f"each request carries its first {room:,} bytes (the file on disk is whole); shorten it with "
        "`nanobot memory edit`"
    ]


def status_snapshot(cfg: Config, session_key: str = "cli:direct") -> tuple[BudgetSnapshot, bool]:
    """What `nanobot status` shows: the budget the next request of `session_key` would be fitted with
    (built exactly as `open_assistant` builds it), and whether that session exists yet."""
    workspace = cfg.workspace_path()
    budget = build_budget(cfg)
    context = build_context(cfg, workspace)
    tools = build_tools(cfg, workspace)
    add_main_agent_tools(
        tools, cfg, workspace, session_key, _NoSpawner()
    )  # schemas only: nothing is run
    store = session_store(workspace)
    session = store.load(session_key) if store.exists(session_key) else None
    snap = budget.snapshot(
        session, system_prompt=context.system_prompt, tools=tools.schemas(), probe=probe_message()
    )
    return snap, session is not None
