"""Count lost subagent reports in `nanobot agent -m`: a helper finishing before, during and after
the parent turn, many times each.

Uses the timings and the scripted model of tests/cli/test_agent_oneshot.py against a local fake
LLM server, in a throwaway NANOBOT_HOME; nothing touches the network or your ~/.nanobot.

    python scripts/report_races.py              # 20 in-process trials per timing + 1 real CLI each
    python scripts/report_races.py -n 100 --cli 5

A report counts as handled when the reaction to it reached stdout and was saved in the session.
Prints one line per timing and mode; exit code 1 if any report was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load_engine():
    spec = importlib.util.spec_from_file_location(
        "oneshot_tests", REPO / "tests" / "cli" / "test_agent_oneshot.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def handled(key: str, out: str) -> bool:
    from nanobot.session.store import SessionStore

    saved = SessionStore().load(key).messages
    return "handled the report" in out and any(
        m.get("content") == "handled the report" for m in saved
    )


def in_process(cfg, key: str) -> bool:
    from nanobot.cli.chat import _one_shot

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = asyncio.run(
            _one_shot(cfg, key, "count the files in the background", markdown=False, json_out=False)
        )
    return code == 0 and handled(key, out.getvalue())


def real_cli(key: str) -> bool:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nanobot",
            "agent",
            "-s",
            key,
            "-m",
            "count the files in the background",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode == 0 and handled(key, result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="in-process trials per timing")
    parser.add_argument(
        "--cli", type=int, default=1, help="real `nanobot agent -m` trials per timing"
    )
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="nanobot-races-")) / ".nanobot"
    home.mkdir(parents=True)
    os.environ.update(NANOBOT_HOME=str(home), HOME=str(home.parent), NO_PROXY="127.0.0.1,localhost")
    engine = load_engine()
    from nanobot.config import load_config
    from nanobot.fakellm import FakeLLMServer

    lost = 0
    with FakeLLMServer() as server:
        config = {
            "agents": {"defaults": {"model": "custom/test-model", "provider": "custom"}},
            "providers": {
                "custom": {"apiKey": "sk-test-key-123456", "apiBase": server.openai_base_url}
            },
        }
        (home / "config.json").write_text(json.dumps(config))
        cfg = load_config(home / "config.json")
        for timing, params in engine.TIMINGS.items():
            server.responder = engine.helper_responder(**params)
            for mode, trials, run in (
                ("in-process", args.n, lambda k: in_process(cfg, k)),
                ("real CLI", args.cli, real_cli),
            ):
                ok = 0
                for trial in range(trials):
                    server.reset()
                    ok += run(f"cli:{timing}-{mode.replace(' ', '')}-{trial}")
                    if server.violations():
                        print(f"  invalid requests: {server.violations()}")
                lost += trials - ok
                if trials:
                    print(
                        f"{timing:<7} {mode:<10} {trials:>4} trials  {ok:>4} handled  {trials - ok:>3} lost"
                    )
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
