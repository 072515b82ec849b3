"""What the memory store's safety costs: recall on a big HISTORY.md, and the door on ordinary turns.

    python scripts/bench_memory_door.py --size-mb 100

1. search_history (the model's recall tool) on a generated HISTORY.md: a word that is not there
   and words only the oldest entry holds (the whole file is read), a rare word (148 entries) and a
   common one (205k entries).
2. An ordinary turn (no memory change) through the real Conversation and the fake server: the
   turn's time, and what it wrote to memory/ (versions, MEMORY.md, journal) — it should be nothing.
3. The exec hook (snapshot before, check after) on a command that does not touch memory/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def best_of(runs: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def recall(root: Path, size_mb: float, runs: int) -> None:
    from nanobot.memory.store import MemoryStore
    from nanobot.tools.base import ToolContext
    from nanobot.tools.recall import SearchHistoryTool

    from bench_history_grep import generate

    ws = root / "recall"
    store = MemoryStore(ws)
    store.dir.mkdir(parents=True)
    t = time.perf_counter()
    generate(store.history_file, size_mb)
    # one fact only the oldest entry holds: recall must read the whole file to find it
    oldest = b"[2019-12-31 09:00] The user keeps the passport in the blue folder QUOKKA.\n\n"
    store.history_file.write_bytes(oldest + store.history_file.read_bytes())
    print(
        f"HISTORY.md: {store.history_file.stat().st_size / 1e6:.1f} MB, generated in {time.perf_counter() - t:.1f}s"
    )
    os.environ["NANOBOT_HOME"] = str(
        root / "home"
    )  # the recall index is built there, never in ~/.nanobot
    tool = SearchHistoryTool(ToolContext(workspace=ws))
    t = time.perf_counter()
    from nanobot.tools.recall import open_index

    index = open_index(tool.ctx)
    index.refresh()  # built once (scripts/bench_recall_scale.py measures that); searches then read what is new
    index.close()
    print(f"recall index built in {time.perf_counter() - t:.1f}s")
    print(f"{'search_history query':<28}{'hits':>8}{'chars':>8}{'time':>10}")
    for label, query in (
        ("absent word (full pass)", "qqqzzz"),
        ("rare: oldest entry only", "quokka passport"),
        ("rare word (148 entries)", "XYZZY"),
        ("common word", "lisbon"),
        ("two common words", "lisbon deadline"),
    ):
        secs, out = best_of(runs, lambda: asyncio.run(tool.run(query=query)))
        entries = sum(
            1 for line in out.splitlines() if line[:1] == "[" and line[1 : line.find("]")].isdigit()
        )
        print(f"{label:<28}{entries:>8}{len(out):>8}{secs * 1000:>8.1f}ms")


def ordinary_turns(root: Path, turns: int) -> None:
    from nanobot.app import open_assistant
    from nanobot.config import load_config
    from nanobot.fakellm import FakeLLMServer, Reply
    from nanobot.memory.store import MemoryStore

    home = root / "home"
    os.environ["NANOBOT_HOME"] = str(home)
    with FakeLLMServer() as server:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.json").write_text(
            '{"agents": {"defaults": {"model": "custom/m", "provider": "custom"}}, "providers": {"custom": '
            f'{{"apiKey": "sk-bench-123456", "apiBase": "{server.openai_base_url}"}}}}}}'
        )
        cfg = load_config(None)
        store = MemoryStore(cfg.workspace_path())
        store.write_memory(
            "# Memory\n\n" + "".join(f"- fact {i}\n" for i in range(200)), reason="bench setup"
        )
        server.responder = lambda req: Reply.text("ok")

        def memory_files() -> dict[str, tuple[int, int]]:
            found = {}
            for folder in (store.dir, store.journal_dir):
                for p in folder.rglob("*"):
                    if p.is_file() and not p.name.endswith(".lock"):
                        st = p.stat()
                        found[str(p)] = (st.st_size, st.st_mtime_ns)
            return found

        async def go() -> float:
            assistant = open_assistant(cfg, "cli:bench", stream=False)
            try:
                await assistant.conversation.send("warm up")
                before = memory_files()
                t = time.perf_counter()
                for i in range(turns):
                    await assistant.conversation.send(f"ordinary turn {i}")
                secs = (time.perf_counter() - t) / turns
                changed = [p for p, v in memory_files().items() if before.get(p) != v]
                print(
                    f"ordinary turn: {secs * 1000:.1f} ms each over {turns} turns; files written in memory/ "
                    f"and the journal: {len(changed)} {changed or ''}; versions: {len(store.versions())}"
                )
            finally:
                await assistant.aclose()
            return secs

        asyncio.run(go())


def exec_hook(root: Path, runs: int) -> None:
    import nanobot.tools.shell as shell
    from nanobot.memory.store import MemoryStore
    from nanobot.tools.base import ToolContext

    ws = root / "exec"
    MemoryStore(ws).write_memory("# Memory\n\n- a fact\n", reason="bench")
    tool = shell.ExecTool(ToolContext(workspace=ws))
    with_hook, _ = best_of(runs, lambda: asyncio.run(tool.run(command="true")))
    real = shell.watch_memory

    @contextlib.contextmanager
    def no_watch(_ws):
        class W:
            note = ""

        yield W()

    shell.watch_memory = no_watch
    try:
        without, _ = best_of(runs, lambda: asyncio.run(tool.run(command="true")))
    finally:
        shell.watch_memory = real
    print(
        f"exec `true`: {with_hook * 1000:.2f} ms with the memory hook, {without * 1000:.2f} ms without "
        f"(hook: {(with_hook - without) * 1000:+.2f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nanobot-bench-door-"))
    try:
        print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
        recall(root, args.size_mb, args.runs)
        ordinary_turns(root, args.turns)
        exec_hook(root, max(args.runs, 10))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
