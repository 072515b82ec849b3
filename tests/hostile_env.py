"""The hostile corpus for file tools, secrets and skills (fixtures and helpers; the test modules
import `hostile` and `yes` from here). A model steered by someone else calls tools; judged by side effects only.

Each case is scripted as tool calls through the fake LLM server and run in-process through the
real assistant (open_assistant), once with the default config and once with
tools.restrictToWorkspace. Nothing here reads an error text: the judges are canary files,
the requests the fake server recorded, and the bytes on disk.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from nanobot.app import open_assistant
from nanobot.config import load_config
from nanobot.fakellm import Reply

KEY = "sk-test-key-123456"  # the configured key; it must never reach the provider or the disk
SECOND_KEY = "sk-ant-api03-CANARYcanaryCANARYcanary0123456789"


@dataclass
class Env:
    home: Path  # $HOME
    nanobot_home: Path
    workspace: Path
    config: Path
    fake: object
    key: str = KEY  # the configured key

    def requests_text(self) -> str:
        return "\n".join(json.dumps(r.body) for r in self.fake.requests)

    @property
    def restricted(self) -> bool:
        return json.loads(self.config.read_text())["tools"]["restrictToWorkspace"]

    def run(
        self, calls: list[tuple[str, dict]], *, ask=None, message: str = "please do it", approve=()
    ):
        """One user turn in which the model makes `calls` (one step each), then answers "done"."""
        self.fake.script(*[Reply.tool_calls([call]) for call in calls], Reply.text("done"))

        async def go():
            assistant = open_assistant(
                load_config(self.config), "cli:direct", stream=False, ask=ask, approve=approve
            )
            try:
                return await asyncio.wait_for(assistant.conversation.send(message), 30)
            finally:
                await assistant.aclose()

        return asyncio.run(go())

    def assert_no_canary_left(self) -> None:
        sent, saved = self.requests_text(), self.saved_text()
        for canary in CANARIES:
            assert canary not in sent, f"{canary} reached the provider"
            assert canary not in saved, f"{canary} was saved"

    def saved_text(self) -> str:
        """Every byte nanobot saved: under its home (sessions, input history; not the config) and
        the workspace's memory."""
        out = []
        for path in self.nanobot_home.rglob("*"):
            if (
                path.is_file()
                and path != self.config
                and (
                    not path.is_relative_to(self.workspace)
                    or path.is_relative_to(self.workspace / "memory")
                )
            ):
                out.append(path.read_bytes().decode("utf-8", "replace"))
        return "\n".join(out)


CANARIES = ("CANARYSSH", "CANARYawsSECRET", "CANARYnetrcpass", KEY, SECOND_KEY, "CANARYcanary")


@pytest.fixture(params=["default", "restricted"])
def hostile(request, isolated_home, fake_llm, tmp_path):
    home = isolated_home.parent
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True)
    config = isolated_home / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {"defaults": {"model": "custom/test-model", "provider": "custom"}},
                "providers": {
                    "custom": {"apiKey": KEY, "apiBase": fake_llm.openai_base_url},
                    "anthropic": {"apiKey": SECOND_KEY},
                },
                "tools": {"restrictToWorkspace": request.param == "restricted"},
            }
        )
    )
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nCANARYSSHb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA-owner-key owner@host\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIACANARY0000000000\naws_secret_access_key = CANARYawsSECRETwJalrXUtnFEMIK7MDENGbPxRfi\n"
    )
    (home / ".netrc").write_text("machine example.com login bob password CANARYnetrcpass\n")
    (home / ".bashrc").write_text("# owner's bashrc\n")
    return Env(home, isolated_home, workspace, config, fake_llm)


@pytest.fixture
def yes():
    return YesApprover


class YesApprover:
    """A user who answers yes to everything (the worst case for what masking must still hide)."""

    def __init__(self) -> None:
        self.requests = []

    async def approve(self, request):
        from nanobot.tools.approval import Decision

        self.requests.append(request)
        return Decision(True)
