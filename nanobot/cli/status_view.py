"""The /status view: model, context used vs window, last usage, session size."""

from __future__ import annotations

from nanobot import tokens


def bar(used: int, total: int, width: int = 24) -> str:
    share = 0.0 if total <= 0 else min(1.0, used / total)
    filled = round(share * width)
    return "█" * filled + "░" * (width - filled) + f" {share:.0%}"


def status_lines(assistant) -> list[str]:
    conv = assistant.conversation
    cfg = assistant.cfg
    window = cfg.defaults.context_window_tokens
    system = conv.context.system_prompt()
    history = conv.session.get_history()
    used = (tokens.count_text(system) + tokens.count_messages(history)
            + tokens.count_tools(conv.tools.schemas() if conv.tools else None))
    session = conv.session
    usage = conv.last_usage
    return [
        f"model      {cfg.defaults.model}",
        f"context    {bar(used, window)}  ~{used:,} / {window:,} tokens ({tokens.estimator_name()})",
        f"last turn  prompt {usage.prompt_tokens:,} · completion {usage.completion_tokens:,} tokens",
        f"session    {session.key}: {len(session.messages)} messages, "
        f"{len(session.messages) - session.last_consolidated} not yet consolidated",
        f"workspace  {assistant.workspace}",
        *[f"subagent   {sub_id} '{label}' running: {task[:60]}" for sub_id, label, task in conv.running_subagents()],
    ]
