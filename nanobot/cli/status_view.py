"""The /status view: model, context used vs window, last usage, session size."""

from __future__ import annotations

from nanobot import tokens


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
        *[f"subagent   {sub_id} '{label}' running: {task[:60]}" for sub_id, label, task in conv.running_subagents()],
        *_approvals(assistant),
    ]


def _approvals(assistant) -> list[str]:
    approver = getattr(assistant, "approver", None)
    if approver is None:
        return []
    auto = ", ".join(sorted(approver.auto)) or "none"
    always = ", ".join(sorted(approver.always)) or "none yet"
    return [f"approvals  auto-approved: {auto}; 'always' this session: {always}"]


def _calibration(conv) -> str:
    ratio = conv.consolidator.calibration.ratio if conv.consolidator is not None else 1.0
    return f", corrected x{ratio:.2f} by the provider's counts" if ratio > 1.0 else ""


def _last_consolidation(conv) -> list[str]:
    report = conv.last_consolidation
    return [f"memory     last consolidation {report.receipt()}"] if report is not None else []
