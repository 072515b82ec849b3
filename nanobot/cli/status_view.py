"""The /status view: model, context used vs window, last usage, session size."""

from __future__ import annotations

from nanobot import tokens
from nanobot.messages import NOTE_KEY


def exec_line(cfg) -> str:
    """What confines exec with this config, in one line (the same words everywhere)."""
    from nanobot.app import confinement

    ex = cfg.tools.exec
    if not ex.enable:
        return "disabled (tools.exec.enable is false)"
    return confinement(cfg).describe(network=ex.network, restrict=cfg.tools.restrict_to_workspace,
                                     unconfined_ok=ex.confinement == "none" or ex.allow_unconfined)


def bar(used: int, total: int, width: int = 24) -> str:
    share = 0.0 if total <= 0 else min(1.0, used / total)
    filled = round(share * width)
    return "█" * filled + "░" * (width - filled) + f" {share:.0%}"


def status_lines(assistant) -> list[str]:
    conv = assistant.conversation
    cfg = assistant.cfg
    window = cfg.defaults.context_window_tokens
    # the consolidator's own estimate (calibrated, with room for the next message), so the bar
    # reaches 100% exactly when consolidation has to run
    used = conv.estimate()
    budget = conv.consolidator.budget if conv.consolidator is not None else window
    session = conv.session
    usage = conv.last_usage
    return [
        f"model      {cfg.defaults.model}",
        f"context    {bar(used, budget)}  ~{used:,} / {budget:,} tokens "
        f"(window {window:,} minus {window - budget:,} for the reply)",
        f"estimator  {tokens.estimator_name()}" + _calibration(conv),
        f"last turn  prompt {usage.prompt_tokens:,} · completion {usage.completion_tokens:,} tokens",
        f"session    {session.key}: {len(session.messages)} messages, "
        f"{len(session.messages) - session.last_consolidated} not yet consolidated",
        f"workspace  {assistant.workspace}",
        f"exec       {exec_line(cfg)}",
        *_last_consolidation(conv),
        *_mcp(assistant),
        *_helpers(conv),
        *_approvals(assistant),
    ]


def _approvals(assistant) -> list[str]:
    approver = getattr(assistant, "approver", None)
    if approver is None:
        return []
    auto = ", ".join(sorted(approver.auto)) or "none"
    always = ", ".join(sorted(approver.always)) or "none yet"
    return [f"approvals  auto-approved: {auto}; 'always' this session: {always}"]


def _helpers(conv, earlier_shown: int = 5) -> list[str]:
    """This run's helpers (running or ended), after the last few that earlier runs noted in the session."""
    live = conv.helpers()
    ids = {record.id for record in live}
    earlier = [m[NOTE_KEY] for m in conv.session.messages
               if isinstance(m.get(NOTE_KEY), dict) and m[NOTE_KEY].get("id") not in ids]
    return ([f"helper     {note.get('summary', '?')} (earlier run)" for note in earlier[-earlier_shown:]]
            + [f"helper     {record.summary()} — task: {record.task[:60]}" for record in live])


def _calibration(conv) -> str:
    ratio = conv.consolidator.calibration.ratio if conv.consolidator is not None else 1.0
    return f", corrected x{ratio:.2f} by the provider's counts" if ratio > 1.0 else ""


def _mcp(assistant) -> list[str]:
    manager = getattr(assistant, "mcp", None)
    if manager is None:
        return []
    parts = []
    for r in manager.reports():
        parts.append(f"{r.name} {r.state}" + (f" ({len(r.tools)} tools)" if r.state == "ready" else
                                              f" ({r.error})" if r.error else ""))
    return [f"mcp        {'; '.join(parts)}"]


def _last_consolidation(conv) -> list[str]:
    report = conv.last_consolidation
    return [f"memory     last consolidation {report.receipt()}"] if report is not None else []
