"""What one exec call costs as a user feels it: the real turn, end to end, per mechanism.

One turn whose model (the local fake LLM server) asks for N exec calls of `command` in one step;
each goes through approval, the sandbox launch, output capture and the session's durable save of
its result. Printed per mechanism: wall and CPU milliseconds per call (the turn's time minus a
turn with no calls, divided by N), beside the same call made straight through ExecTool.run and a
bare `subprocess.run` of the command, so the three layers' shares are visible.

    python scripts/bench_exec.py [--calls 100] [--command true] [--mechanism landlock --mechanism landlock-fork]

"landlock-fork" is Landlock with the launcher switched off: the hook forked from nanobot itself,
as before nanobot/sandbox/launcher.py. Runs in a throwaway home and workspace (nothing in
~/.nanobot is touched), no network. CPU counts nanobot and every child process it reaped, the
launcher and its keepers included (it is stopped and reaped inside each measurement); bwrap's
sandboxed processes are not reaped by nanobot, so that CPU leaves them out. Where a cpuacct
cgroup (v1) can be made (root), the script runs in one of its own and also prints "all": the CPU
of every process of the measurement, bwrap's sandbox included (as scripts/suite_cpu.py counts).
On a busy machine wall time is mostly waiting for a core, so read both (the load is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


_CGROUP: Path | None = None  # this script's own cpuacct cgroup, when one could be made


def _join_cgroup() -> None:
    """Into a cpuacct cgroup of its own (cgroup v1, root), so every process it starts is counted."""
    global _CGROUP
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpuacct" in controllers.split(","):
                own = (
                    Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/") / f"bench-exec-{os.getpid()}"
                )
                own.mkdir()
                (own / "cgroup.procs").write_text(str(os.getpid()))
                _CGROUP = own
                return
    except OSError:
        _CGROUP = None


def _all_cpu() -> float:
    """CPU seconds of every process in the script's cgroup so far (0 without one)."""
    return int((_CGROUP / "cpuacct.usage").read_text()) / 1e9 if _CGROUP else 0.0


_last_all = 0.0  # the cgroup's CPU in the last _timed call


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall s, CPU s) of one call of fn; the Landlock launcher is stopped and reaped inside, so
    its CPU and its keepers' are counted too. The cgroup's figure goes to _last_all."""
    global _last_all
    from nanobot.sandbox import launcher

    w0, c0, a0 = time.perf_counter(), _cpu(), _all_cpu()
    fn()
    launcher.close()
    _last_all = _all_cpu() - a0
    return time.perf_counter() - w0, _cpu() - c0


def bare_subprocess(command: str, calls: int) -> tuple[float, float]:
    def run() -> None:
        for _ in range(calls):
            subprocess.run(
                ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, capture_output=True
            )

    wall, cpu = _timed(run)
    return wall / calls, cpu / calls


def tool_only(mode: str, ws: Path, command: str, calls: int) -> tuple[float, float]:
    from nanobot.sandbox import choose
    from nanobot.tools.base import ToolContext
    from nanobot.tools.exec_rules import ExecRules
    from nanobot.tools.shell import ExecTool

    tool = ExecTool(
        ToolContext(
            workspace=ws,
            confinement=choose(mode),
            exec_rules=ExecRules(network=False, unconfined_ok=True),
        )
    )

    async def run_all() -> None:
        for _ in range(calls):
            await tool.run(command=command)

    asyncio.run(tool.run(command=command))  # warm-up: probes and caches
    wall, cpu = _timed(lambda: asyncio.run(run_all()))
    global _tool_all
    _tool_all = _last_all / calls
    return wall / calls, cpu / calls


_tool_all = 0.0  # tool_only's per-call CPU of every process (the cgroup), 0 without one


def _write_config(nb_home: Path, base_url: str, mode: str, calls: int) -> Path:
    nb_home.mkdir(parents=True, exist_ok=True)
    path = nb_home / "config.json"
    path.write_text(
        json.dumps(
            {
                "agents": {
                    "defaults": {
                        "model": "custom/test-model",
                        "provider": "custom",
                        "maxToolCallsPerStep": calls + 1,
                    }
                },
                "providers": {"custom": {"apiKey": "sk-bench-key-123456", "apiBase": base_url}},
                "tools": {
                    "exec": {
                        "confinement": mode,
                        "network": False,
                        **({"allowUnconfined": True} if mode == "none" else {}),
                    }
                },
            }
        )
    )
    path.chmod(0o600)
    return path


def turn(
    mode: str, nb_home: Path, command: str, calls: int, label: str = ""
) -> tuple[float, float, list[str]]:
    """(wall s, CPU s, the tool results) of one turn making `calls` exec calls."""
    from nanobot.app import open_assistant
    from nanobot.config import load_config
    from nanobot.fakellm import FakeLLMServer, Reply

    with FakeLLMServer() as fake:
        cfg = load_config(_write_config(nb_home, fake.openai_base_url, mode, calls))
        replies = [Reply.tool_calls([("exec", {"command": command})] * calls)] if calls else []
        fake.script(*replies, Reply.text("done"))

        async def one_turn() -> list[str]:
            assistant = open_assistant(cfg, f"cli:bench-{label}-{calls}", stream=False)
            try:
                await assistant.conversation.send("run it")
                msgs = assistant.conversation.session.messages
                return [m["content"] for m in msgs if m.get("role") == "tool"]
            finally:
                await assistant.aclose()

        out: list[list[str]] = []
        wall, cpu = _timed(lambda: out.append(asyncio.run(one_turn())))
    return wall, cpu, out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--command", default="true")
    parser.add_argument(
        "--mechanism",
        action="append",
        choices=["none", "bwrap", "landlock", "landlock-fork"],
        help="repeatable; default: all. landlock-fork: Landlock forked from nanobot itself, "
        "as before the launcher",
    )
    args = parser.parse_args()
    _join_cgroup()
    modes = args.mechanism or ["none", "bwrap", "landlock", "landlock-fork"]
    with tempfile.TemporaryDirectory(prefix="nanobot-bench-exec-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        os.environ["HOME"] = str(home)
        os.environ["NANOBOT_HOME"] = str(home / ".nanobot")
        os.environ["NO_PROXY"] = "127.0.0.1,localhost"
        for proxy in (
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ):
            os.environ.pop(proxy, None)
        from nanobot.sandbox import choose, launcher

        ws = home / ".nanobot" / "workspace"
        ws.mkdir(parents=True)
        load = os.getloadavg()
        print(
            f"exec {args.command!r}, {args.calls} calls, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
            f"{os.cpu_count()} cores"
        )
        wall, cpu = bare_subprocess(args.command, args.calls)
        print(
            f"{'subprocess':13} {wall * 1000:6.1f} ms wall {cpu * 1000:6.1f} ms CPU per call (bare /bin/sh -c)"
        )
        for label in modes:
            mode = label.removesuffix("-fork")
            launcher.ENABLED = label != "landlock-fork"
            conf = choose(mode)
            if conf.mechanism != mode:
                print(f"{label:13} unavailable: {conf.detail}")
                continue
            t_wall, t_cpu = tool_only(mode, ws, args.command, args.calls)
            turn(mode, home / ".nanobot", args.command, 1, label)  # warm-up: imports, SDK, probes
            t_all = _tool_all
            w0, c0, _ = turn(mode, home / ".nanobot", args.command, 0, label)
            a0 = _last_all
            w1, c1, results = turn(mode, home / ".nanobot", args.command, args.calls, label)
            ok = sum(r.rstrip().endswith("[exit code: 0]") for r in results)
            per_wall, per_cpu = (w1 - w0) / args.calls, (c1 - c0) / args.calls
            every = f" ({(_last_all - a0) / args.calls * 1000:.1f} all)" if _CGROUP else ""
            print(
                f"{label:13} {per_wall * 1000:6.1f} ms wall {per_cpu * 1000:6.1f} ms CPU{every} per call "
                f"in a turn ({ok}/{len(results)} exit 0); ExecTool.run alone {t_wall * 1000:6.1f} ms "
                f"wall {t_cpu * 1000:6.1f} ms CPU"
                + (f" ({t_all * 1000:.1f} all)" if _CGROUP else "")
            )
    if _CGROUP is not None:  # back to the parent cgroup, then the empty one can go
        (_CGROUP.parent / "cgroup.procs").write_text(str(os.getpid()))
        _CGROUP.rmdir()


if __name__ == "__main__":
    main()
