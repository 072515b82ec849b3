"""Short lines the chat and `agent -m` print about a turn: what was saved when saving failed."""

from __future__ import annotations


def unsaved_notice(conversation, saved_before: int, *, one_shot: bool) -> str:
    """Say plainly whether the user's message reached the disk (a failed save leaves no torn line)."""
    if len(conversation.session.messages) == saved_before:
        again = (
            "run the same command again"
            if one_shot
            else "it is back at the prompt: press Enter to send it"
        )
        return (
            f"[yellow]your message was not saved and was not sent to the model[/yellow]; once there is "
            f"room, {again}"
        )
    return (
        "[yellow]the turn stopped: your message and the steps before this one are saved; the last "
        "step could not be[/yellow]"
    )


def resume_notice(session) -> str | None:
    """On opening the chat: say that an earlier conversation was loaded (and how to start afresh)."""
    count = len(session.messages)
    if not count:
        return None
    waiting = count - session.last_consolidated
    since = f", last at {session.updated_at[:16].replace('T', ' ')}" if session.updated_at else ""
    return (
        f"[dim]resumed {session.key}: {count} earlier message(s), {waiting} in the prompt{since} · "
        f"/new starts afresh[/dim]"
    )


def continuation_marker(width: int, line_number: int, wrap_count: int) -> str:
    """What stands before each further line of a multi-line message, aligned under the prompt
    (a line that is only wrapped by the terminal gets no marker)."""
    return " " * width if wrap_count else "… ".rjust(width)
