"""Workloads for scripts/bench.py: a throwaway nanobot home, realistic sessions, a scripted model.

Nothing here touches the real ~/.nanobot or the network: every home is a temp folder whose
config.json points a `custom` provider at a local FakeLLMServer.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from nanobot.fakellm import FakeLLMServer, Reply
from nanobot.fakellm import server as _fake_server
from nanobot.provider_table import scrubbed_env_names

WORDS = (
    "the project release notes meeting calendar python rust memory tokens budget config session "
    "server logs error fix deploy tests refactor database migration cache latency request user "
    "file folder script output build branch commit review plan draft schedule invoice report "
    "weather trains lisbon porto coffee dinner friday monday budget numbers table chart"
).split()

TOOL_MARK = "[bench:tool]"  # a user message containing this is answered with a tool call
MEMORY_MD = """# About the user
- Name: Ana; works as a backend engineer in Lisbon; prefers short answers.
- Projects: `ledger` (Rust service, Postgres), `site` (static blog, Python build script).
- Uses fish shell and neovim; deploys with `make release` on Fridays.

# Preferences
- Dates as YYYY-MM-DD; metric units; coffee, not tea.
"""


def sentence(rng: random.Random, lo: int = 6, hi: int = 18) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        s = sentence(rng)
        out.append(s)
        n += len(s) + 1
    return " ".join(out)


def code_like(rng: random.Random, chars: int) -> str:
    """Tool output that looks like a file or a listing: short lines, indentation, symbols."""
    lines, n = [], 0
    while n < chars:
        kind = rng.random()
        if kind < 0.3:
            line = f"def {rng.choice(WORDS)}_{rng.choice(WORDS)}(self, {rng.choice(WORDS)}: int = {rng.randint(0, 99)}):"
        elif kind < 0.6:
            line = f"    {rng.choice(WORDS)} = {rng.choice(WORDS)}.{rng.choice(WORDS)}({rng.randint(0, 999)})"
        elif kind < 0.8:
            line = f"-rw-r--r-- 1 ana ana {rng.randint(100, 99999):>6} Mar {rng.randint(1, 28):>2} {rng.choice(WORDS)}.py"
        else:
            line = "    # " + sentence(rng, 4, 10)
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


# -- sessions -----------------------------------------------------------------------------------


def _call(call_id: str, name: str, args: dict) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _turn(rng: random.Random, shape: int, i: int) -> list[dict]:
    """One stored turn of `shape` messages: 2 = user/answer, 4 = one tool call, 5 = two tool calls."""
    user = {"role": "user", "content": prose(rng, rng.randint(40, 300))}
    answer = {"role": "assistant", "content": prose(rng, rng.randint(120, 900))}
    if shape == 2:
        return [user, answer]
    tools = [
        ("read_file", lambda: {"path": f"src/{rng.choice(WORDS)}.py"}),
        ("exec", lambda: {"command": f"grep -rn {rng.choice(WORDS)} src | head -50"}),
        ("list_dir", lambda: {"path": rng.choice(WORDS)}),
        ("web_search", lambda: {"query": sentence(rng, 3, 6)}),
    ]
    calls = []
    for k in range(shape - 3):
        name, args = rng.choice(tools)
        calls.append(_call(f"call_s{i}_{k}", name, args()))
    msgs = [user, {"role": "assistant", "content": None, "tool_calls": calls}]
    for c in calls:
        body = (
            code_like(rng, rng.randint(300, 3000))
            if c["function"]["name"] != "web_search"
            else prose(rng, rng.randint(300, 1500))
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": c["id"],
                "name": c["function"]["name"],
                "content": body,
            }
        )
    return msgs + [answer]


def session_messages(size: int, seed: int = 7) -> list[dict]:
    """Exactly `size` stored messages in whole turns (user first, every tool call answered)."""
    rng = random.Random(seed)
    when = datetime(2025, 6, 1, 9, 0)
    out: list[dict] = []
    plan: list[int] = []
    left = size
    while left >= 10:
        shape = rng.choice((2, 2, 4, 4, 5))
        plan.append(shape)
        left -= shape
    plan += {0: [], 2: [2], 4: [4], 5: [5], 6: [4, 2], 7: [5, 2], 8: [4, 4], 9: [5, 4]}[left]
    for i, shape in enumerate(plan):
        for msg in _turn(rng, shape, i):
            when += timedelta(seconds=rng.randint(2, 90))
            msg["timestamp"] = when.isoformat(timespec="seconds")
            out.append(msg)
    assert len(out) == size, (len(out), size)
    return out


def write_session(path: Path, key: str, size: int, *, tail: int | None = 40, seed: int = 7) -> int:
    """Write a session file directly (metadata line, then messages); returns last_consolidated.

    `tail`: leave about this many messages unconsolidated (the pointer sits on a user message),
    as in a long-running session that consolidates; None leaves everything unconsolidated.
    """
    msgs = session_messages(size, seed)
    pointer = 0
    if tail is not None and size > tail:
        pointer = max(i for i in range(size - tail + 1) if msgs[i]["role"] == "user")
    meta = {
        "_type": "metadata",
        "key": key,
        "created_at": msgs[0]["timestamp"] if msgs else "2025-06-01T09:00:00",
        "updated_at": msgs[-1]["timestamp"] if msgs else "2025-06-01T09:00:00",
        "metadata": {},
        "last_consolidated": pointer,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(meta) + "\n")
        fh.writelines(json.dumps(m, ensure_ascii=False) + "\n" for m in msgs)
    return pointer


# -- the scripted model -------------------------------------------------------------------------


def is_consolidation(rec: Any) -> bool:
    """A request carrying the save_memory tool is a consolidation call."""
    for tool in rec.tools or []:
        name = (tool.get("function") or {}).get("name") if isinstance(tool, dict) else None
        if (name or (tool.get("name") if isinstance(tool, dict) else None)) == "save_memory":
            return True
    return False


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class ScriptedModel:
    """A stateless-by-request responder: what to answer is read from the request itself.

    - a consolidation request (save_memory tool) gets a save_memory call that keeps MEMORY.md
      and adds one line;
    - a user message containing TOOL_MARK and a path gets a read_file call for it;
    - anything else gets a text answer of a seeded, varying length.
    """

    def __init__(self, seed: int = 11, answer_chars: tuple[int, int] = (200, 1200)) -> None:
        self.rng = random.Random(seed)
        self.answer_chars = answer_chars
        self.consolidations = 0

    def __call__(self, rec: Any) -> Reply:
        if is_consolidation(rec):
            return self._save_memory(rec)
        last = rec.messages[-1] if rec.messages else {}
        if last.get("role") == "user" and TOOL_MARK in _text(last.get("content")):
            m = re.search(r"read (\S+)", _text(last.get("content")))
            return Reply.tool_calls([("read_file", {"path": m.group(1) if m else "notes.md"})])
        return Reply.text(prose(self.rng, self.rng.randint(*self.answer_chars)))

    def _save_memory(self, rec: Any) -> Reply:
        self.consolidations += 1
        body = "\n".join(_text(m.get("content")) for m in rec.messages if m.get("role") == "user")
        m = re.search(r"## Current MEMORY\.md\n\n(.*?)\n\n## Conversation excerpt", body, re.S)
        memory = m.group(1).strip() if m and m.group(1).strip() != "(empty)" else MEMORY_MD.strip()
        stamp = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d)\]", body)
        entry = (
            f"[{stamp.group(1) if stamp else '2025-06-01 09:00'}] Consolidation {self.consolidations}: "
            + sentence(self.rng, 20, 40)
        )
        if (
            self.consolidations % 5 == 0
        ):  # a new lasting fact now and then, so MEMORY.md grows slowly
            memory += f"\n- Fact {self.consolidations}: " + sentence(self.rng, 5, 10)
        return Reply.tool_calls(
            [("save_memory", {"history_entry": entry, "memory_update": memory + "\n"})]
        )


def user_turns(n: int, seed: int = 5, tool_share: float = 0.4) -> list[str]:
    """The user's side of a scripted conversation: questions, some asking to read a workspace file."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = prose(rng, rng.randint(40, 400))
        if rng.random() < tool_share:
            text = f"{TOOL_MARK} Please read notes/{rng.randint(0, 7)}.md and tell me: {text}"
        out.append(text)
    return out


# -- a fake server that also stamps when a request started arriving --------------------------

_arrival = threading.local()


def _stamp_arrival(do_post: Any) -> Any:
    def wrapper(handler: Any) -> None:
        _arrival.t = time.monotonic()
        do_post(handler)

    wrapper.stamped = True  # type: ignore[attr-defined]
    return wrapper


if not getattr(_fake_server._Handler.do_POST, "stamped", False):
    _fake_server._Handler.do_POST = _stamp_arrival(_fake_server._Handler.do_POST)


class TimedFakeLLMServer(FakeLLMServer):
    """FakeLLMServer whose records also carry `t_arrived`: before the body was read and checked.

    `t_received` is stamped after the server parsed the body and checked it against the message
    rules, which takes milliseconds on a big prompt; that time is the fake server's, not nanobot's.
    """

    def _record(self, protocol: str, path: str, headers: dict, body: dict) -> Any:
        rec = super()._record(protocol, path, headers, body)
        rec.t_arrived = getattr(_arrival, "t", rec.t_received)
        return rec


def server_seconds(recs: list) -> float:
    """Time the fake server spent on these requests: from arrival to answer."""
    return sum((r.t_answered or r.t_received) - getattr(r, "t_arrived", r.t_received) for r in recs)


# -- a throwaway home ---------------------------------------------------------------------------


class BenchHome:
    """A temp NANOBOT_HOME with a workspace (templates, MEMORY.md, notes) and a fake server."""

    def __init__(
        self,
        *,
        context_window: int | None = None,
        defaults: dict | None = None,
        server_window: int | None = None,
        seed: int = 3,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="nanobot-bench-"))
        self.home = self.root / ".nanobot"
        self.workspace = self.home / "workspace"
        self.server = TimedFakeLLMServer(context_window=server_window).start()
        self.model = ScriptedModel()
        self.server.responder = self.model
        d = {"model": "custom/bench-model", "provider": "custom", **(defaults or {})}
        if context_window is not None:
            d["contextWindowTokens"] = context_window
        self.home.mkdir(parents=True)
        (self.home / "config.json").write_text(
            json.dumps(
                {
                    "agents": {"defaults": d},
                    "providers": {
                        "custom": {
                            "apiKey": "sk-bench-key-123456",
                            "apiBase": self.server.openai_base_url,
                        }
                    },
                }
            )
        )
        os.chmod(self.home / "config.json", 0o600)
        from nanobot.cli.setup import copy_templates

        copy_templates(self.workspace)
        (self.workspace / "memory").mkdir(parents=True, exist_ok=True)
        (self.workspace / "memory" / "MEMORY.md").write_text(MEMORY_MD)
        rng = random.Random(seed)
        (self.workspace / "notes").mkdir(exist_ok=True)
        for k in range(8):
            (self.workspace / "notes" / f"{k}.md").write_text(
                code_like(rng, rng.randint(500, 4000))
            )

    @property
    def env(self) -> dict[str, str]:
        """The environment for a nanobot child process: this home, no keys, no proxies."""
        secret = scrubbed_env_names(os.environ)
        # bytecode allowed, as an installed package has it (pip compiles at install): a checkout's
        # first (warm-up) run writes it, so neither side is timed compiling its source
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in secret
            and k != "PYTHONDONTWRITEBYTECODE"
            and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
        }
        env.update(
            NANOBOT_HOME=str(self.home),
            HOME=str(self.root),
            NO_PROXY="127.0.0.1,localhost",
            TIKTOKEN_CACHE_DIR=str(self.root / "tiktoken-cache"),
        )
        return env

    def activate(self) -> None:
        """Point this process at the home (for in-process measurements)."""
        os.environ.update(
            {
                k: v
                for k, v in self.env.items()
                if k in ("NANOBOT_HOME", "NO_PROXY", "TIKTOKEN_CACHE_DIR")
            }
        )
        for k in scrubbed_env_names(os.environ) - {"NANOBOT_HOME"}:
            os.environ.pop(k, None)

    def session_path(self, key: str = "cli:direct") -> Path:
        from nanobot.session.store import SessionStore

        return SessionStore(self.home / "sessions").path_for(key)

    def config(self):
        from nanobot.config import load_config

        return load_config(self.home / "config.json")

    def close(self) -> None:
        self.server.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> BenchHome:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def nanobot_argv() -> list[str]:
    """The installed `nanobot` command next to this Python, else `python -m nanobot`."""
    exe = Path(sys.executable).parent / "nanobot"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "nanobot"]
