"""`nanobot demo`: try nanobot with no API key, against the bundled fake LLM server.

The real chat runs (sessions, tools, memory, the screen) in a throwaway home folder; the answers
come from the scripted brain in nanobot/fakellm/demo.py and say so. Your own ~/.nanobot is not
read or written, and nothing leaves this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from nanobot.cli.consoles import stderr_console

DEMO_MODEL = "custom/scripted-demo"


def _write_config(home: Path, api_base: str) -> Path:
    config = home / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "defaults": {
                        "model": DEMO_MODEL,
                        "provider": "custom",
                        "workspace": str(home / "workspace"),
                    }
                },
                "providers": {
                    "custom": {"apiKey": "no-key-needed-for-the-demo", "apiBase": api_base}
                },
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    config.chmod(0o600)
    return config


def run_demo(*, message: str | None, markdown: bool) -> int:
    """The chat (or one message with `message`) on the scripted server, in a throwaway home."""
    from nanobot.cli.chat import run_agent
    from nanobot.cli.errors import say
    from nanobot.cli.setup import copy_templates
    from nanobot.fakellm import FakeLLMServer
    from nanobot.fakellm.demo import LABEL, demo_reply

    server = FakeLLMServer()
    server.responder = demo_reply
    saved_home = os.environ.get("NANOBOT_HOME")
    home = Path(tempfile.mkdtemp(prefix="nanobot-demo-"))  # 0700; removed in `finally`
    try:
        with server:
            config = _write_config(home, server.openai_base_url)
            copy_templates(
                home / "workspace"
            )  # what `nanobot onboard` gives: something for list_dir to show
            say(  # one of nanobot's own lines: wrapped at words on a terminal, whole when piped
                stderr_console(),
                f"[bold yellow]{LABEL}[/bold yellow]: answers come from nanobot's bundled fake LLM "
                f"on {server.openai_base_url}, not from a model; no API key, nothing leaves this "
                f"machine. Home for this demo: {home} (removed at the end).",
            )
            os.environ["NANOBOT_HOME"] = str(
                home
            )  # sessions, memory and input history stay in the demo home
            return run_agent(
                message=message,
                session_key="cli:demo",
                workspace=None,
                config_path=config,
                model=None,
                markdown=markdown,
                json_out=False,
            )
    finally:
        if saved_home is None:
            os.environ.pop("NANOBOT_HOME", None)
        else:
            os.environ["NANOBOT_HOME"] = saved_home
        shutil.rmtree(home, ignore_errors=True)
