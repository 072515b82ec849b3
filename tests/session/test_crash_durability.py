"""Crash durability: SIGKILL a real `nanobot agent -m` process at random moments of a turn.

Each *chain* is one session (own NANOBOT_HOME, own fake LLM server, OpenAI or Anthropic wire) that
runs a sequence of one-shot turns. Every turn is a *trial*: the process is started, killed at a
moment picked by the trial's *aim* (a random time, right after the server received a request, right
after a reply landed (the session append), while a tool runs, between two tool calls, during a
streamed answer, right after the answer was printed), and then checked:

- every turn whose answer reached stdout is on disk (the user's text and the final assistant text);
- the session file loads (`SessionStore.open` on a copy of it, then close) with no warning unless
  its last line is torn;
- the next process's first request (the next chain trial, or a final normal turn) breaks none of
  the fake server's rules, contains every acknowledged turn in order, and closes every tool call that
  has no result on disk with a synthetic "interrupted" result.

Chains run concurrently with fixed seeds; set NANOBOT_CRASH_SEED to vary the base seed.
`scripts/crash_trials.py` runs the same engine for many more trials.
"""

from __future__ import annotations

import json
import os
import pty
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nanobot.fakellm import FakeLLMServer, Reply
from nanobot.provider_table import scrubbed_env_names
from nanobot.session.store import SessionStore

Start = Callable[..., Any]  # subprocess.Popen, or a fork server's popen

BASE_SEED = int(os.environ.get("NANOBOT_CRASH_SEED", "20260301"))
CHAINS = 3
TRIALS_PER_CHAIN = 17  # 3 x 17 = 51 trials, plus one normal closing turn per chain
WORKERS = 3  # chains at a time: a process waiting on a reply or a tool leaves the CPU to another

WORDS = (
    "river",
    "lamp",
    "orbit",
    "quartz",
    "maple",
    "signal",
    "ember",
    "delta",
    "harbor",
    "violet",
    "copper",
    "meadow",
    "falcon",
    "prism",
    "tundra",
    "cobalt",
    "saffron",
    "glacier",
)

# aim -> weight; every aim is described in run_trial
AIMS = {
    "random_time": 2,  # anywhere from process start to the end of the turn (startup kills included)
    "tool_random": 2,  # anywhere inside a tool turn, measured from the first request
    "write_window": 3,  # just after a reply landed: the append + fsync of what it produced
    "after_request": 2,  # right after the server received request k (the user message was just saved)
    "during_tool": 1,  # while `exec sleep` runs: the tool-call message is saved, its result is not
    "between_tools": 1,  # first of two calls answered and saved, second still running
    "multi_step": 1,  # a random point of a three-request turn
    "after_answer": 1,  # as soon as the answer is on stdout
    "stream": 2,  # the answer streamed to a terminal (pty); killed while the deltas arrive
    "none": 1,  # not killed: a normal turn
}


# ---------------------------------------------------------------------------------------------
# a subprocess whose output is collected as it arrives


class Proc:
    """`nanobot agent -m` with stdout on a pipe (or a pseudo-terminal, for streamed answers).

    `start` makes the process: `subprocess.Popen`, or the test fork server's `popen` (a real
    process too, forked from a helper that has already imported nanobot; tests/forkserver.py)."""

    def __init__(
        self, argv: list[str], env: dict, *, use_pty: bool, stderr_path: Path, start: Start
    ) -> None:
        self._buf = bytearray()
        self._cond = threading.Condition()
        self._stderr = open(stderr_path, "ab")
        if use_pty:
            master, slave = pty.openpty()
            self.p = start(
                argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=self._stderr, env=env
            )
            os.close(slave)
            fd = master
        else:
            self.p = start(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr, env=env
            )
            fd = self.p.stdout.fileno()
        self._fd, self._pty = fd, use_pty
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.killed_at: float | None = None

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:  # EIO on the pty master once the child is gone
                chunk = b""
            with self._cond:
                if not chunk:
                    self._cond.notify_all()
                    break
                self._buf += chunk
                self._cond.notify_all()

    def output(self) -> str:
        with self._cond:
            return self._buf.decode("utf-8", "replace").replace("\r", "")

    def wait_output(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while needle not in self._buf.decode("utf-8", "replace").replace("\r", ""):
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._reader.is_alive()):
                    return needle in self._buf.decode("utf-8", "replace").replace("\r", "")
                self._cond.wait(min(left, 0.05))
            return True

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.killed_at = time.monotonic()

    def finish(self, timeout: float = 60) -> int:
        try:
            code = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.p.wait()
            raise AssertionError(f"nanobot did not finish within {timeout}s") from None
        finally:
            self._reader.join(timeout=5)
            if self._pty:
                os.close(self._fd)
            elif self.p.stdout:
                self.p.stdout.close()
            self._stderr.close()
        return code


def sleep_until(t: float) -> None:
    left = t - time.monotonic()
    if left > 0:
        time.sleep(left)


# ---------------------------------------------------------------------------------------------
# what the session file and a recorded request contain


def read_disk(path: Path) -> tuple[list[dict], bool]:
    """The messages in a session file (readable lines only) and whether the last line is torn."""
    if not path.exists():
        return [], False
    raw = path.read_bytes()
    messages = []
    for line in raw.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("role"), str):
            messages.append(record)
    torn = bool(raw) and not raw.endswith(b"\n")
    return messages, torn


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            text_of(
                p.get("text")
                if isinstance(p, dict) and p.get("type") == "text"
                else p.get("content")
                if isinstance(p, dict) and p.get("type") == "tool_result"
                else ""
            )
            for p in content
        )
    return ""


def missing_results(messages: list[dict]) -> list[str]:
    """Tool-call ids an assistant message on disk declared that no tool result answers."""
    declared, answered = [], set()
    for m in messages:
        if m.get("role") == "assistant":
            declared += [c.get("id") for c in m.get("tool_calls") or [] if isinstance(c, dict)]
        elif m.get("role") == "tool":
            answered.add(m.get("tool_call_id"))
    return [i for i in declared if i and i not in answered]


def flatten(protocol: str, messages: list) -> list[tuple]:
    """A request's messages as ("user"|"assistant", text) / ("call", id) / ("result", id, text)."""
    items: list[tuple] = []
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if protocol == "openai":
            if role == "tool":
                items.append(("result", m.get("tool_call_id"), text_of(content)))
                continue
            items.append((role, text_of(content)))
            items += [("call", c.get("id")) for c in m.get("tool_calls") or []]
            continue
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        items.append((role, "\n".join(texts)))
        for b in blocks:
            if b.get("type") == "tool_use":
                items.append(("call", b.get("id")))
            elif b.get("type") == "tool_result":
                items.append(("result", b.get("tool_use_id"), text_of(b.get("content"))))
    return items


def check_next_request(
    protocol: str, messages: list, acked: list[tuple[str, str]], open_calls: list[str]
) -> list[str]:
    """Problems with the first request after a kill (empty list: all good)."""
    items = flatten(protocol, messages)
    problems = []
    pos = 0
    for user, answer in acked:
        for role, needle in (("user", user), ("assistant", answer)):
            while pos < len(items) and not (items[pos][0] == role and needle in items[pos][1]):
                pos += 1
            if pos == len(items):
                problems.append(
                    f"acknowledged {role} text {needle!r} is missing from the next request "
                    f"(or out of order)"
                )
                return problems
            pos += 1
    for call_id in open_calls:
        # ids may be renamed when duplicated; ours are unique, so the stored id must be there
        at = next((k for k, it in enumerate(items) if it[0] == "call" and it[1] == call_id), None)
        if at is None:
            problems.append(f"interrupted call {call_id} is not in the next request")
            continue
        results = [it for it in items[at + 1 :] if it[0] == "result" and it[1] == call_id]
        if not results or "interrupted" not in results[0][2]:
            problems.append(
                f"interrupted call {call_id} is not closed by a synthetic 'interrupted' result: "
                f"{results!r}"
            )
    return problems


# ---------------------------------------------------------------------------------------------
# one chain of trials on one session


@dataclass
class Stats:
    trials: int = 0
    killed: int = 0
    acked: int = 0
    lost: int = 0
    next_requests_checked: int = 0
    interrupted_closed: int = 0
    torn_lines: int = 0
    streamed_seen_not_acked: int = 0
    streamed_shown_not_saved: int = 0
    aims: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def add(self, other: Stats) -> None:
        for name in (
            "trials",
            "killed",
            "acked",
            "lost",
            "next_requests_checked",
            "interrupted_closed",
            "torn_lines",
            "streamed_seen_not_acked",
            "streamed_shown_not_saved",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.aims.update(other.aims)
        self.failures += other.failures

    def summary(self) -> str:
        aims = ", ".join(f"{k}={v}" for k, v in sorted(self.aims.items()))
        return (
            f"{self.trials} trials ({self.killed} killed mid-turn), {self.acked} acknowledged turns, "
            f"{self.lost} lost; {self.next_requests_checked} next-turn requests checked, "
            f"{self.interrupted_closed} interrupted tool calls seen closed, {self.torn_lines} torn last lines, "
            f"{self.streamed_seen_not_acked} streamed answers fully shown but killed before the closing "
            f"newline ({self.streamed_shown_not_saved} of them not saved); aims: {aims}"
        )


class Chain:
    def __init__(
        self,
        index: int,
        seed: int,
        root: Path,
        nanobot_cmd: list[str],
        protocol: str,
        start: Start = subprocess.Popen,
    ) -> None:
        self.name = f"c{index}"
        self.rng = random.Random(seed)
        self.seed = seed
        self.protocol = protocol
        self.home = root / f"chain{index}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.key = f"crash:{self.name}"
        self.cmd = nanobot_cmd
        self.start = start
        self.server = FakeLLMServer().start()
        self.store_dir = self.home / "sessions"
        self.path = SessionStore(self.store_dir).path_for(self.key)
        self.acked: list[tuple[str, str]] = []
        self.stats = Stats()
        self.startup = 1.5  # seconds from launch to the first request, re-measured as we go
        self.turn = 0
        self.closed_calls: set[str] = set()  # open tool calls already seen closed in a request
        self._write_config()

    def _write_config(self) -> None:
        if self.protocol == "anthropic":
            data = {
                "agents": {"defaults": {"model": "anthropic/claude-test"}},
                "providers": {
                    "anthropic": {
                        "apiKey": "sk-ant-test-key-123456",
                        "apiBase": self.server.anthropic_base_url,
                    }
                },
            }
        else:
            data = {
                "agents": {"defaults": {"model": "custom/test-model", "provider": "custom"}},
                "providers": {
                    "custom": {
                        "apiKey": "sk-test-key-123456",
                        "apiBase": self.server.openai_base_url,
                    }
                },
            }
        (self.home / "config.json").write_text(json.dumps(data))

    def close(self) -> None:
        self.server.stop()

    def fail(self, message: str) -> None:
        self.stats.failures.append(
            f"[{self.name} seed={self.seed} turn={self.turn} {self.protocol}] {message}"
        )

    # -- helpers ---------------------------------------------------------------------------

    def _env(self) -> dict:
        secret = scrubbed_env_names(os.environ)
        env = {k: v for k, v in os.environ.items() if k not in secret}
        env.update(
            NANOBOT_HOME=str(self.home),
            HOME=str(self.home),
            PYTHONUNBUFFERED="1",
            TERM="xterm",
            COLUMNS="400",
            NO_PROXY="127.0.0.1,localhost",
        )
        return env

    def _count_lines(self, needle: str) -> int:
        try:
            data = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return 0
        return sum(1 for line in data.splitlines() if needle in line)

    def _wait_disk(self, needle: str, baseline: int, proc: Proc, timeout: float = 20) -> bool:
        """Poll the session file until a line containing `needle` is added."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.p.poll() is None:
            if self._count_lines(needle) > baseline:
                return True
            time.sleep(0.002)
        return False

    # -- one trial -------------------------------------------------------------------------

    def run_trial(self, aim: str, *, final: bool = False) -> None:
        rng, server = self.rng, self.server
        self.turn += 1
        tag = f"{self.name}-{self.turn}"
        user = f"turn {tag}: tell me about {rng.choice(WORDS)}"
        answer = f"Answer {tag}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 40)))
        messages_before, _ = read_disk(self.path)
        expect_acked = list(self.acked)
        expect_open = missing_results(messages_before)
        server.reset()

        d1, d2 = round(rng.uniform(0.0, 0.15), 3), round(rng.uniform(0.0, 0.15), 3)
        sleep_cmd = f"sleep {rng.choice([0.1, 0.2, 0.3])}"
        if aim in ("random_time", "after_answer", "none"):
            script = [Reply.text(answer, delay=d1)]
        elif aim == "stream":
            script = [Reply.text(answer, delay=d1, chunks=rng.randint(10, 60))]
        elif aim == "during_tool":
            script = [
                Reply.tool_calls([("exec", {"command": "sleep 2"})], delay=d1),
                Reply.text(answer),
            ]
        elif aim == "between_tools":
            script = [
                Reply.tool_calls(
                    [("exec", {"command": f"echo first-{tag}"}), ("exec", {"command": "sleep 2"})],
                    delay=d1,
                ),
                Reply.text(answer),
            ]
        elif aim == "multi_step":
            script = [
                Reply.tool_calls([("exec", {"command": f"echo step-{tag}"})], delay=d1),
                Reply.tool_calls([("list_dir", {"path": "."})], delay=d2),
                Reply.text(answer, delay=d1),
            ]
        else:  # tool_random, write_window, after_request
            script = [
                Reply.tool_calls([("exec", {"command": sleep_cmd})], delay=d1),
                Reply.text(answer, delay=d2),
            ]
        server.script(*script)

        argv = [*self.cmd, "agent", "-m", user, "-s", self.key, "--no-markdown"]
        calls_before = self._count_lines('"tool_calls"')
        t0 = time.monotonic()
        proc = Proc(
            argv,
            self._env(),
            use_pty=aim == "stream",
            stderr_path=self.home / "stderr.log",
            start=self.start,
        )
        try:
            self._aim(aim, proc, tag, answer, d1, d2, float(sleep_cmd.split()[1]), t0, calls_before)
        finally:
            code = proc.finish()
        if not final:
            self.stats.trials += 1
            self.stats.aims[aim] += 1
        killed = code == -signal.SIGKILL
        if killed:
            self.stats.killed += 1
        elif code != 0:
            self.fail(
                f"nanobot exited with {code} (aim {aim}); stderr in {self.home / 'stderr.log'}"
            )
        requests = server.requests
        if requests:
            self.startup = 0.7 * self.startup + 0.3 * (requests[0].t_received - t0)

        # 1. the first request this process sent is the "next turn" after the previous kill
        for rec in requests:
            for v in rec.violations:
                self.fail(f"request {rec.index} (aim {aim}) broke a rule: {v}")
        if requests:
            self.stats.next_requests_checked += 1
            for problem in check_next_request(
                self.protocol, requests[0].messages, expect_acked, expect_open
            ):
                self.fail(problem)
            fresh = set(expect_open) - self.closed_calls
            self.closed_calls |= fresh
            self.stats.interrupted_closed += len(fresh)

        # 2. was this turn acknowledged? (answer on stdout; streamed: the answer and its closing newline)
        out = proc.output()
        acked = (answer + "\n") in out if aim == "stream" else answer in out
        seen_not_acked = aim == "stream" and not acked and answer in out
        self.stats.streamed_seen_not_acked += seen_not_acked
        if not killed and not acked:
            self.fail(f"a turn that ran to the end printed no answer (aim {aim}): {out!r}")
        if acked:
            self.acked.append((user, answer))
            self.stats.acked += 1

        # 3. every acknowledged turn is on disk, and the file loads
        on_disk, torn = read_disk(self.path)
        self.stats.torn_lines += torn
        users = [m.get("content") for m in on_disk if m.get("role") == "user"]
        answers = [m.get("content") for m in on_disk if m.get("role") == "assistant"]
        if seen_not_acked and answer not in answers:
            # the whole text was on the screen, then the kill came before it was saved: streamed
            # text is necessarily shown before the turn is durable; the closing newline marks delivery
            self.stats.streamed_shown_not_saved += 1
        for u, a in self.acked:
            if u not in users or a not in answers:
                self.stats.lost += 1
                self.fail(
                    f"acknowledged turn lost: user={u in users} answer={a in answers} ({u!r})"
                )
        if self.path.exists():
            scratch = Path(tempfile.mkdtemp(dir=self.home))
            try:
                shutil.copy2(self.path, scratch / self.path.name)
                store = SessionStore(scratch)
                session = store.open(self.key)
                store.close(session)
                bad = [w for w in session.warnings if not (torn and "damaged line" in w)]
                if bad:
                    self.fail(f"loading after the kill warned: {bad}")
            except Exception as exc:  # noqa: BLE001 - reported as a failure with the chain's seed
                self.fail(
                    f"the session file does not load after the kill: {type(exc).__name__}: {exc}"
                )
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        if (
            aim in ("during_tool", "between_tools")
            and killed
            and self._count_lines('"tool_calls"') > calls_before
        ):
            if not missing_results(on_disk):
                self.fail(
                    f"aim {aim}: the tool call was saved but nothing is left open (the tool finished?)"
                )

    def _aim(
        self,
        aim: str,
        proc: Proc,
        tag: str,
        answer: str,
        d1: float,
        d2: float,
        sleep_s: float,
        t0: float,
        calls_before: int,
    ) -> None:
        rng, server = self.rng, self.server
        if aim == "none":
            return
        if aim == "random_time":
            sleep_until(t0 + rng.uniform(0.1, self.startup + d1 + 0.25))
        elif aim == "tool_random":
            if not server.wait_for_requests(1, timeout=30):
                return
            time.sleep(rng.uniform(0, d1 + sleep_s + d2 + 0.2))
        elif aim == "write_window":
            k = rng.choice([1, 2])
            if not server.wait_for_requests(k, timeout=30):
                return
            rec = server.requests[k - 1]
            delay = d1 if k == 1 else d2
            # the reply goes out `delay` after arrival; the client then parses it and appends + fsyncs
            sleep_until(rec.t_received + delay + rng.uniform(0.0, 0.04))
        elif aim == "after_request":
            k = rng.choice([1, 2])
            if not server.wait_for_requests(k, timeout=30):
                return
            time.sleep(rng.uniform(0, 0.01))
        elif aim == "during_tool":
            if not self._wait_disk('"tool_calls"', calls_before, proc):
                return
            time.sleep(rng.uniform(0, 0.5))
        elif aim == "between_tools":
            if not self._wait_disk(f"first-{tag}", 0, proc):
                return
            time.sleep(rng.uniform(0, 0.1))
        elif aim == "multi_step":
            if not server.wait_for_requests(1, timeout=30):
                return
            time.sleep(rng.uniform(0, 2 * d1 + d2 + 0.4))
        elif aim == "after_answer":
            proc.wait_output(answer, timeout=30)
        elif aim == "stream":
            if not proc.wait_output(f"Answer {tag}", timeout=30):
                return
            time.sleep(rng.choice([0, 0, rng.uniform(0, 0.02)]))
        proc.kill()


def run_chain(
    index: int,
    seed: int,
    trials: int,
    root: Path,
    nanobot_cmd: list[str],
    start: Start = subprocess.Popen,
) -> Stats:
    protocol = "anthropic" if index % 2 else "openai"
    chain = Chain(index, seed, root, nanobot_cmd, protocol, start)
    try:
        aims, weights = zip(*AIMS.items())
        # every aim at least once per chain when there is room, then random ones
        plan = list(aims) if trials >= len(aims) else []
        plan += chain.rng.choices(aims, weights, k=trials - len(plan))
        chain.rng.shuffle(plan)
        for aim in plan:
            chain.run_trial(aim)
        chain.run_trial("none", final=True)  # a normal closing turn checks the last kill
    finally:
        chain.close()
    return chain.stats


def run_trials(
    n_chains: int,
    trials_per_chain: int,
    root: Path,
    nanobot_cmd: list[str],
    base_seed: int = BASE_SEED,
    workers: int = WORKERS,
    start: Start = subprocess.Popen,
    first_chain: int = 0,
) -> Stats:
    total = Stats()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(run_chain, i, base_seed + i, trials_per_chain, root, nanobot_cmd, start)
            for i in range(first_chain, first_chain + n_chains)
        ]
        for future in futures:
            total.add(future.result())
    return total


# ---------------------------------------------------------------------------------------------
# the tests


# The everyday suite runs the first chain; the thorough tier (tests/conftest.py) the other two, each
# with its own seed, so together they are the CHAINS x TRIALS_PER_CHAIN trials.
@pytest.mark.timeout(600)  # up to ~55 real processes
@pytest.mark.parametrize(
    ("first_chain", "n_chains"),
    [
        pytest.param(0, 1, id="chain-1"),
        pytest.param(1, CHAINS - 1, id="chains-2-3", marks=pytest.mark.thorough),
    ],
)
def test_sigkill_at_random_moments_loses_no_acknowledged_turn(
    tmp_path, nanobot_cmd, nanobot_forkserver, first_chain, n_chains
):
    # every trial is a real process, forked from a helper that imported nanobot once (a fresh
    # interpreter's imports took a second of CPU per trial); scripts/crash_trials.py starts fresh ones
    stats = run_trials(
        n_chains,
        TRIALS_PER_CHAIN,
        tmp_path / "chains",
        nanobot_cmd,
        start=nanobot_forkserver.popen,
        first_chain=first_chain,
    )
    print("\ncrash trials:", stats.summary())
    assert not stats.failures, "\n".join(stats.failures[:30])
    assert stats.trials >= n_chains * TRIALS_PER_CHAIN
    assert stats.lost == 0
    assert stats.acked > 0 and stats.killed >= 10 * n_chains


def test_kill_while_a_tool_runs_closes_the_call_as_interrupted_in_the_next_request(
    fake_llm, configure, isolated_home, nanobot_cmd, nanobot_forkserver
):
    configure()
    fake_llm.script(
        Reply.tool_calls(
            [("exec", {"command": "echo done-first"}), ("exec", {"command": "sleep 5"})]
        ),
        Reply.text("never shown"),
    )
    sessions = isolated_home / "sessions"
    path = SessionStore(sessions).path_for("cli:direct")
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", "run two things"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the first result is checkpointed, the sleep is running
            # the first result itself (the call's arguments say "done-first" too, a step earlier)
            if path.exists() and any(m.get("role") == "tool" for m in read_disk(path)[0]):
                break
            time.sleep(0.01)
        else:
            pytest.fail("the first tool result never reached the session file")
        time.sleep(0.2)
    finally:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert "never shown" not in out.decode()
    stored, _ = read_disk(path)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    call_ids = [c["id"] for c in stored[1]["tool_calls"]]
    assert missing_results(stored) == [call_ids[1]]

    fake_llm.reset()
    fake_llm.script(Reply.text("picked up where we left off"))
    result = nanobot_forkserver.run(
        [*nanobot_cmd, "agent", "-m", "what happened?"], text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "picked up where we left off"
    fake_llm.assert_all_valid()
    sent = fake_llm.requests[0].messages
    roles = [m["role"] for m in sent]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == call_ids
    assert sent[3]["tool_call_id"] == call_ids[0] and "done-first" in sent[3]["content"]
    assert sent[4]["tool_call_id"] == call_ids[1] and "interrupted" in sent[4]["content"]
    # the file stays an honest log: the synthetic result is only in the request, not on disk
    stored_after, _ = read_disk(path)
    assert not any("interrupted" in str(m.get("content")) for m in stored_after)
    assert stored_after[-1] == {
        **stored_after[-1],
        "role": "assistant",
        "content": "picked up where we left off",
    }


def test_a_streamed_answer_fully_on_screen_is_on_disk(tmp_path, nanobot_cmd, nanobot_forkserver):
    chain = Chain(0, BASE_SEED, tmp_path, nanobot_cmd, "openai")
    try:
        for attempt in range(
            3
        ):  # one loss is enough to show the window; 3 clean runs would mean it is closed
            answer = f"Streamed answer {attempt}: " + " ".join(WORDS) + " the end."
            chain.server.reset()
            chain.server.script(Reply.text(answer, chunks=30))
            proc = Proc(
                [
                    *nanobot_cmd,
                    "agent",
                    "-m",
                    f"stream {attempt}",
                    "-s",
                    chain.key,
                    "--no-markdown",
                ],
                chain._env(),
                use_pty=True,
                stderr_path=tmp_path / "stderr.log",
                start=nanobot_forkserver.popen,
            )
            try:
                assert proc.wait_output(answer, timeout=60), proc.output()
            finally:
                proc.kill()  # the instant the last word is visible
                proc.finish()
            stored, _ = read_disk(chain.path)
            assert answer in [m.get("content") for m in stored if m.get("role") == "assistant"], (
                f"attempt {attempt}: the answer was fully on screen but is not in the session file"
            )
    finally:
        chain.close()
