"""Short lines the chat and `agent -m` print about a turn: what was saved when saving failed."""

from __future__ import annotations


def unsaved_notice(conversation, saved_before: int, *, one_shot: bool) -> str:
    """Say plainly whether the user's message reached the disk (a failed save leaves no torn line)."""
    if len(conversation.session.messages) == saved_before:
        again = "run the same command again" if one_shot else "it is back at the prompt: press Enter to send it"
        return (f"[yellow]your message was not saved and was not sent to the model[/yellow]; once there is "
                f"room, {again}")
    return ("[yellow]the turn stopped: your message and the steps before this one are saved; the last "
            "step could not be[/yellow]")
