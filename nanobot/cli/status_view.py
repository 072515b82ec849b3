"""The budget as both status screens show it (`/status` and `nanobot status`), and the /status view."""

from __future__ import annotations

from nanobot.agent.budget import BudgetSnapshot
from nanobot.messages import NOTE_KEY
from nanobot.session.working_state import WorkingState, items_phrase


def exec_line(cfg) -> str:
    """What confines exec with this config, in one line (the same words everywhere)."""
    from nanobot.app import confinement

    ex = cfg.tools.exec
    if not ex.enable:
        return "disabled (tools.exec.enable is false)"
    return confinement(cfg).describe(
        network=ex.network,
        restrict=cfg.tools.restrict_to_workspace,
        unconfined_ok=ex.confinement == "none" or ex.allow_unconfined,
    )


def bar(used: int, total: int, width: int = 24) -> str:
    share = 0.0 if total <= 0 else min(1.0, used / total)
    filled = round(share * width)
    return "█" * filled + "░" * (width - filled) + f" {share:.0%}"


def budget_rows(snap: BudgetSnapshot) -> list[tuple[str, str]]:
    """(label, text) rows from the budget's snapshot: the numbers the next request is fitted with."""
    window = f"window {snap.window:,}"
    if snap.window != snap.configured_window:
        window += f" (configured {snap.configured_window:,}, shrunk after the provider said so)"
    cap = (
        f"; prompt capped at {snap.prompt_cap:,} by agents.defaults.contextBlockLimit"
        if snap.prompt_cap and snap.prompt_cap < snap.window - snap.reply_tokens
        else ""
    )
    corrected = (  # a ratio of 1.001 is no correction: "x1.00" read as a contradiction
        f", corrected x{snap.ratio:.2f} by the provider's counts"
        if round(snap.ratio, 2) > 1.0
        else ""
    )
    return [
        (
            "context",
            f"{bar(snap.estimate, snap.budget)}  ~{snap.estimate:,} / {snap.budget:,} tokens "
            f"({window} minus {snap.reply_tokens:,} kept for the reply{cap})",
        ),
        *(
            [
                (
                    "compaction",
                    f"starts at ~{snap.consolidate_at:,} tokens "
                    f"({snap.consolidate_at / snap.budget:.0%} of the budget; "
                    "agents.defaults.consolidateAboveTokens)",
                )
            ]
            if 0 < snap.consolidate_at < snap.budget
            else []
        ),
        ("reply room", f"{snap.reply_tokens:,} tokens (max_tokens of every request)"),
        (
            "fixed",
            f"~{snap.fixed:,} tokens for the system prompt, MEMORY.md and tool schemas "
            f"({snap.fixed_share:.0%} of the budget)",
        ),
        ("tool calls", f"at most {snap.max_tool_calls} per step"),
        ("estimator", snap.estimator + corrected),
        *[("warning", text) for text in snap.warnings()],
    ]


def working_state_rows(state: WorkingState) -> list[tuple[str, str]]:
    """(label, text) rows: the checkpoint in force, and a failed last compaction (both status screens)."""
    current = state.current
    archived = len(state.archived)
    if current is not None:
        text = (
            f"version {current.number}: {items_phrase(current.items)}, written {current.at} "
            f"(`nanobot session show` prints it)"
        )
    elif archived:
        text = (
            f"none in force: /new started this conversation afresh ({state.new_at}); "
            f"{archived} earlier version{'s' if archived != 1 else ''} archived "
            f"(`nanobot session show` lists them); the next compaction writes a new one"
        )
    else:
        text = "no checkpoint yet (the first compaction writes one)"
    rows = [("working", text)]
    failed = state.failed
    if failed is not None:
        rows.append(
            (
                "warning",
                f"the last compaction failed ({failed.get('at', '?')}): {failed.get('reason', '?')}; "
                "nothing was lost, it is tried again after the next turn (or run /compact)",
            )
        )
    return rows


def status_lines(assistant) -> list[str]:
    conv = assistant.conversation
    cfg = assistant.cfg
    session = conv.session
    usage = conv.last_usage
    rows = budget_rows(conv.snapshot())
    return [
        f"model      {cfg.defaults.model}",
        *[f"{label:<10} {text}" for label, text in rows],
        f"last turn  prompt {usage.prompt_tokens:,} · completion {usage.completion_tokens:,} tokens"
        if usage.prompt_tokens or usage.completion_tokens
        else "last turn  none yet in this run",
        *_spend(assistant),
        f"session    {session.key}: {len(session.messages)} messages, "
        f"{len(session.messages) - session.last_consolidated} not yet consolidated"
        + _archived(assistant.workspace, session.key),
        f"workspace  {assistant.workspace}",
        f"exec       {exec_line(cfg)}",
        *_last_consolidation(conv),
        *[
            f"{label:<10} {text}"
            for label, text in working_state_rows(
                assistant.store.working_state_for(session.key).read()
            )
        ],
        *_mcp(assistant),
        *_helpers(assistant),
        *_approvals(assistant),
    ]


def _archived(workspace, key: str) -> str:
    """ "; N earlier conversation(s) kept by /new" when the session has some (`nanobot session list`)."""
    from nanobot.stores import session_store

    count = len(session_store(workspace).archives(key))
    return (
        f"; {count} earlier conversation(s) kept by /new (`nanobot session list`)" if count else ""
    )


def _spend(assistant) -> list[str]:
    spend_line = getattr(assistant, "spend_line", None)
    return [f"spend      this session: {spend_line()}"] if spend_line is not None else []


def _approvals(assistant) -> list[str]:
    approver = getattr(assistant, "approver", None)
    if approver is None:
        return []
    auto = ", ".join(sorted(approver.auto)) or "none"
    always = ", ".join(sorted(approver.always)) or "none yet"
    return [f"approvals  auto-approved: {auto}; 'always' this session: {always}"]


def _helpers(assistant, earlier_shown: int = 5) -> list[str]:
    """This run's helpers (running or ended), after the last few that earlier runs noted in the session."""
    conv = assistant.conversation
    live = list(assistant.subagents.records.values())
    ids = {record.id for record in live}
    earlier = [
        m[NOTE_KEY]
        for m in conv.session.messages
        if isinstance(m.get(NOTE_KEY), dict) and m[NOTE_KEY].get("id") not in ids
    ]
    return [
        f"helper     {note.get('summary', '?')} (earlier run)" for note in earlier[-earlier_shown:]
    ] + [f"helper     {record.summary()} — task: {record.task[:60]}" for record in live]


def _mcp(assistant) -> list[str]:
    manager = getattr(assistant, "mcp", None)
    if manager is None:
        return []
    parts = []
    for r in manager.reports():
        parts.append(
            f"{r.name} {r.state}"
            + (
                f" ({len(r.tools)} tool{'' if len(r.tools) == 1 else 's'})"
                if r.state == "ready"
                else f" ({r.error})"
                if r.error
                else ""
            )
        )
    return [f"mcp        {'; '.join(parts)}"]


def _last_consolidation(conv) -> list[str]:
    report = conv.upkeep.last
    return [f"memory     last consolidation {report.receipt()}"] if report is not None else []
