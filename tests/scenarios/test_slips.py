"""Small slips noticed in use, each through the real `nanobot` command and the fake model server:
`memory tidy` is metered and limited like a chat turn; `serve --once` with nothing due needs no key;
the context budget's learned margin outlives the process; a fallback model's smaller window is
respected (one too small is passed over) and its answers teach nothing of how the primary counts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from nanobot.fakellm import Reply
from nanobot.memory.store import MemoryStore
from nanobot.usage.ledger import Ledger, UsageRecord, read_records

TIDY_BEFORE = "# Facts\n- The user lives in Porto.\n- The user lives in Porto.\n"
TIDY_AFTER = "# Facts\n- The user lives in Porto.\n"


def _set_config(home: Path, **sections) -> None:
    path = home / "config.json"
    data = json.loads(path.read_text())
    for key, value in sections.items():
        data[key] = value
    path.write_text(json.dumps(data))


def _untidy(home: Path) -> MemoryStore:
    store = MemoryStore(home / "workspace")
    store.write_memory(TIDY_BEFORE, reason="setup")
    return store


def test_memory_tidy_is_in_the_ledger_and_stopped_by_the_daily_limit(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    _set_config(isolated_home, usage={"limits": {"dailyTokens": 100}})
    store = _untidy(isolated_home)
    fake_llm.script(Reply.text(TIDY_AFTER, usage={"prompt_tokens": 90, "completion_tokens": 20}))
    result = nanobot_run("memory", "tidy", "--yes")
    assert result.returncode == 0, result.stderr
    records = list(read_records(isolated_home / "usage"))
    assert [(r.source, r.session, r.prompt, r.completion) for r in records] == [
        ("memory-tidy", "memory:tidy", 90, 20)
    ]
    report = json.loads(nanobot_run("usage", "--json").stdout)["today"]
    assert report["calls"] == 1 and report["bySource"]["memory-tidy"]["calls"] == 1

    store.write_memory(TIDY_BEFORE, reason="untidy again")
    result = nanobot_run("memory", "tidy", "--yes")
    assert result.returncode == 1
    assert (
        "daily token limit is reached" in result.stderr
        and "usage.limits.dailyTokens" in result.stderr
    )
    assert len(fake_llm.requests) == 1  # the second tidy was not sent
    assert store.read_memory() == TIDY_BEFORE


def test_memory_tidy_is_not_background_work(nanobot_run, fake_llm, configure, isolated_home):
    """The background limits pause cron jobs and the heartbeat, not a command the user ran."""
    configure()
    _set_config(
        isolated_home, usage={"limits": {"backgroundDailyTokens": 1000, "jobDailyTokens": 1000}}
    )
    ledger = Ledger(isolated_home / "usage")
    ledger.append(
        UsageRecord(
            t=time.time(),
            session="cron:j",
            source="cron",
            model="custom/test-model",
            prompt=5000,
            job="j",
        )
    )
    ledger.close()
    store = _untidy(isolated_home)
    fake_llm.script(Reply.text(TIDY_AFTER))
    result = nanobot_run("memory", "tidy", "--yes")
    assert result.returncode == 0, result.stderr
    assert store.read_memory() == TIDY_AFTER
    assert len(fake_llm.requests) == 1


def test_serve_once_without_a_key_does_nothing_when_nothing_is_due(nanobot_run, isolated_home):
    """No config and no key: nothing scheduled is a quiet exit 0; a due job or an open heartbeat task
    is the missing-key error that says where the key goes."""
    from nanobot.cron.schedule import parse_schedule
    from nanobot.cron.store import JobStore

    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n\n- [x] water the plants\n")
    idle = nanobot_run("serve", "--once")
    assert idle.returncode == 0, idle.stderr
    assert "nothing due" in idle.stdout and idle.stderr == ""

    (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n\n- [ ] water the plants\n")
    beat = nanobot_run("serve", "--once")
    assert beat.returncode == 2 and "no API key for provider 'anthropic'" in beat.stderr
    assert "ANTHROPIC_API_KEY" in beat.stderr and "nothing due" not in beat.stdout

    (workspace / "HEARTBEAT.md").unlink()
    now = int(time.time() * 1000) - 65_000  # every 60 s, added 65 s ago: due now
    later = JobStore(workspace).add(
        parse_schedule(every_seconds=3600, now_ms=now), "Stretch", now_ms=now
    )
    assert nanobot_run("serve", "--once").returncode == 0  # an hourly job is not due yet
    JobStore(workspace).remove(later.id)
    JobStore(workspace).add(parse_schedule(every_seconds=60, now_ms=now), "Stretch", now_ms=now)
    due = nanobot_run("serve", "--once")
    assert due.returncode == 2 and "ANTHROPIC_API_KEY" in due.stderr


def _margin_server(fake_llm, ratios: list[float]) -> None:
    """A provider counting each request at its own ratio of cl100k's count (in turn from `ratios`)."""
    from nanobot.fakellm.rules import count_prompt_tokens
    from nanobot.tokens import load_offline_encoding

    encode, reason = load_offline_encoding()
    assert encode is not None, reason
    fake_llm.prompt_counter = lambda prompt: count_prompt_tokens(prompt, encode)
    left = list(ratios)

    def respond(request):
        ratio = left.pop(0) if len(left) > 1 else left[0]
        usage = {"prompt_tokens": int(request.estimated_tokens * ratio), "completion_tokens": 5}
        if request.index == 0:
            return Reply.tool_calls([("list_dir", {"path": "."})], usage=usage)
        return Reply.text("done", usage=usage)

    fake_llm.responder = respond


def test_the_learned_margin_is_kept_for_the_next_process(
    nanobot_run, fake_llm, configure, isolated_home
):
    """The first answer teaches the ratio, the second lands 20% above it (a surprise): the next process
    keeps that much of the reply room free, as the first one would have."""
    from nanobot.calibration_file import calibration_path

    configure(contextWindowTokens=8192, maxTokens=2048)
    _margin_server(fake_llm, [1.0, 1.2])
    first = nanobot_run("agent", "-m", "what is here?")
    assert first.returncode == 0, first.stderr
    learned = json.loads(calibration_path().read_text())["custom/test-model"]
    assert learned["surprises"] and 0.19 <= max(learned["surprises"]) <= 0.21, learned
    kept = calibration_path().read_text()

    big = "please summarise: " + " ".join(f"line {i} of the log says ok" for i in range(1500))
    asked, stderr = {}, {}
    for run, surprises in (
        ("kept", learned["surprises"]),
        ("forgotten", None),  # as the file was written before the margin was kept
        ("hand-edited", [0.9]),  # more than the cap nanobot learns up to: never trusted
    ):
        entry = {"ratios": learned["ratios"]}
        if surprises is not None:
            entry["surprises"] = surprises
        calibration_path().write_text(json.dumps({"custom/test-model": entry}))
        fake_llm.reset()
        _margin_server(fake_llm, [1.2])
        result = nanobot_run("agent", "-s", run, "-m", big)
        assert result.returncode == 0, result.stderr
        sent = fake_llm.requests[0]
        asked[run], stderr[run] = (sent.body["max_tokens"], sent.estimated_tokens), result.stderr
    (kept, prompt), (forgotten, _), (edited, _) = (
        asked["kept"],
        asked["forgotten"],
        asked["hand-edited"],
    )
    assert (
        forgotten == edited == 2048
    )  # the reply room as configured: the margin's share is not kept free
    # the learned 20%: the provider's count at the learned ratio plus the margin leaves this much room
    assert abs(kept - (8192 - 1.4 * prompt)) <= 0.01 * prompt, (asked, kept)
    assert "context margin learned for custom/test-model" in stderr["hand-edited"]
    assert "context margin" not in stderr["kept"] + stderr["forgotten"]
    rewritten = json.loads(calibration_path().read_text())["custom/test-model"]
    assert all(0 <= s <= 0.25 for s in rewritten["surprises"])  # the next run starts clean


def _uneven_counter(fake_llm, extra: float) -> None:
    """A provider whose tokenizer is not proportional to cl100k: tool output counts `extra` more."""
    from nanobot.fakellm.rules import count_prompt_tokens
    from nanobot.tokens import load_offline_encoding

    encode, reason = load_offline_encoding()
    assert encode is not None, reason

    def count(prompt: dict) -> int:
        results = [  # OpenAI's tool messages, Anthropic's user messages holding tool_result blocks
            m
            for m in prompt.get("messages") or []
            if m.get("role") == "tool" or '"tool_result"' in json.dumps(m.get("content"))
        ]
        return count_prompt_tokens(prompt, encode) + int(
            extra * count_prompt_tokens({"messages": results}, encode)
        )

    fake_llm.prompt_counter = count


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_an_overflow_at_the_right_window_corrects_the_count_and_keeps_the_window(
    nanobot_run, fake_llm, configure, isolated_home, protocol
):
    """The provider's window is the configured one (it says so in its 400) but it counted more: the window
    stays for the rest of the session (it was shrunk 20% blindly before), the count is corrected."""
    configure(protocol, contextWindowTokens=8192, maxTokens=2048)
    fake_llm.context_window = 8192
    fake_llm.count_max_tokens = True
    _uneven_counter(fake_llm, 0.6)
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "big.log").write_text(
        "".join(f"{i:06d} worker processed job {i * 7} fine\n" for i in range(3000))
    )
    fake_llm.script(
        Reply.tool_calls([("read_file", {"path": "big.log"})]),
        Reply.text("The log looks healthy."),
    )
    result = nanobot_run("agent", "-m", "check big.log")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The log looks healthy."
    rejected = [r for r in fake_llm.requests if r.reply is None]
    accepted = fake_llm.requests[-1]
    assert len(rejected) == 1 and len(fake_llm.requests) == 3
    assert "the window of 8,192 tokens stays" in result.stderr
    assert "working within" not in result.stderr  # was: 6,553 tokens (20% less) from now on
    # the refit used the whole budget of the real window: more of the log than a 6,553-token window
    # holds at all (4,915 for the prompt)
    assert accepted.estimated_tokens > 4915
    assert accepted.estimated_tokens + accepted.body["max_tokens"] <= 8192


def test_a_fallback_with_a_smaller_window_is_sent_what_fits_it(
    nanobot_run, fake_llm, configure, isolated_home
):
    """The primary (32k window) keeps failing with 503s; the fallback has 8k. What the fallback receives is
    fitted to its own 8k (the request fitted to 32k was rejected with a 400, and the rest of the session
    worked within 8k, the primary too), and the primary's window stays."""
    from nanobot.fakellm import FakeLLMServer
    from nanobot.fakellm.rules import count_prompt_tokens
    from nanobot.tokens import load_offline_encoding

    configure(contextWindowTokens=32_768, maxTokens=4096)
    fake_llm.responder = lambda request: Reply.error(503)
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "big.log").write_text(
        "".join(f"{i:06d} worker processed job {i * 7} fine\n" for i in range(3000))
    )
    encode, reason = load_offline_encoding()
    assert encode is not None, reason
    with FakeLLMServer(context_window=8192) as small:
        small.prompt_counter = lambda prompt: count_prompt_tokens(prompt, encode)
        small.count_max_tokens = True  # prompt + max_tokens must fit, as strict APIs ask
        small.script(
            Reply.tool_calls([("read_file", {"path": "big.log"})]),
            Reply.text("The log looks healthy."),
        )
        _set_config(
            isolated_home,
            agents={
                "defaults": {
                    "model": "custom/test-model",
                    "provider": "custom",
                    "contextWindowTokens": 32_768,
                    "maxTokens": 4096,
                    "fallbackModels": [
                        {"model": "small-model", "provider": "small", "contextWindowTokens": 8192}
                    ],
                }
            },
            providers={
                **json.loads((isolated_home / "config.json").read_text())["providers"],
                "small": {"apiKey": "sk-small-123456", "apiBase": small.openai_base_url},
            },
        )
        result = nanobot_run(
            "agent", "-m", "check big.log", env={"NANOBOT_RETRY_BASE_DELAY": "0.01"}
        )
        sent = small.requests
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The log looks healthy."
    assert "switching to fallback model small-model" in result.stderr
    assert len(sent) == 2 and all(r.reply is not None for r in sent)  # none rejected
    for r in sent:
        assert r.estimated_tokens + r.body["max_tokens"] <= 8192
    assert "working within" not in result.stderr  # the primary's 32k window was not shrunk
    assert "000000 worker processed job 0 fine" in json.dumps(sent[-1].messages)  # the log's head


def _serve_fallbacks(home: Path, servers: dict[str, object], fallbacks: list[dict]) -> None:
    """`fallbacks` after the configured primary; each fake server in `servers` is a provider of its own."""
    data = json.loads((home / "config.json").read_text())
    _set_config(
        home,
        agents={"defaults": {**data["agents"]["defaults"], "fallbackModels": fallbacks}},
        providers={
            **data["providers"],
            **{
                name: {"apiKey": f"sk-{name}-123456", "apiBase": server.openai_base_url}  # type: ignore[attr-defined]
                for name, server in servers.items()
            },
        },
    )


def test_a_fallback_whose_window_cannot_hold_the_request_is_passed_over_for_the_next(
    nanobot_run, fake_llm, configure, isolated_home
):
    """The primary keeps failing with 503s; the first fallback's window (1,024 tokens) cannot hold even the
    system prompt and tool schemas; the second is large. The answer comes from the second, the first was
    sent nothing, and the user is told why each was passed over."""
    from nanobot.fakellm import FakeLLMServer

    configure(contextWindowTokens=32_768, maxTokens=4096)
    fake_llm.responder = lambda request: Reply.error(503)
    with FakeLLMServer(context_window=1024) as tiny, FakeLLMServer() as large:
        tiny.script(Reply.text("from the tiny model"))
        large.script(Reply.text("from the large model"))
        _serve_fallbacks(
            isolated_home,
            {"tiny": tiny, "large": large},
            [
                {"model": "tiny-model", "provider": "tiny", "contextWindowTokens": 1024},
                {"model": "large-model", "provider": "large", "contextWindowTokens": 32_768},
            ],
        )
        result = nanobot_run("agent", "-m", "hello", env={"NANOBOT_RETRY_BASE_DELAY": "0.01"})
        to_tiny, to_large = tiny.requests, large.requests
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from the large model"
    assert to_tiny == []  # nothing over its window was sent to it (nothing at all)
    assert len(to_large) == 1 and to_large[0].body["model"] == "large-model"
    said = [ln for ln in result.stderr.splitlines() if "switching to fallback model" in ln]
    assert len(said) == 2
    assert "tiny-model failed (its own context window cannot hold this request" in said[1]
    assert "switching to fallback model large-model" in said[1]


def test_when_no_fallback_can_take_the_request_the_error_names_each_model_tried(
    nanobot_run, fake_llm, configure, isolated_home
):
    """The primary keeps failing with 503s and the only fallback's window is too small: the turn fails with
    one error naming both models and why each failed; the fallback was sent nothing."""
    from nanobot.fakellm import FakeLLMServer

    configure(contextWindowTokens=32_768, maxTokens=4096)
    fake_llm.responder = lambda request: Reply.error(503)
    with FakeLLMServer(context_window=1024) as tiny:
        tiny.script(Reply.text("from the tiny model"))
        _serve_fallbacks(
            isolated_home,
            {"tiny": tiny},
            [{"model": "tiny-model", "provider": "tiny", "contextWindowTokens": 1024}],
        )
        result = nanobot_run("agent", "-m", "hello", env={"NANOBOT_RETRY_BASE_DELAY": "0.01"})
        to_tiny = tiny.requests
    assert result.returncode != 0
    assert "from the tiny model" not in result.stdout
    assert to_tiny == []
    assert "every model failed: custom/test-model (" in result.stderr
    assert "HTTP 503" in result.stderr
    assert "tiny-model (its own context window cannot hold this request" in result.stderr
    assert (
        "its own contextWindowTokens (in agents.defaults.fallbackModels" in result.stderr
    )  # the fix


def test_an_answer_from_a_fallback_does_not_change_how_the_primary_is_counted(
    nanobot_run, fake_llm, configure, isolated_home
):
    """The fallback's provider counts three times what nanobot estimates; a turn it serves must not teach
    the primary that ratio: calibration.json's entry for the primary stays as it was, and the primary's
    next request gets the same reply room as before the fallback answered."""
    from nanobot.calibration_file import calibration_path
    from nanobot.fakellm import FakeLLMServer
    from nanobot.fakellm.rules import count_prompt_tokens
    from nanobot.tokens import load_offline_encoding

    encode, reason = load_offline_encoding()
    assert encode is not None, reason
    configure(contextWindowTokens=16_384, maxTokens=4096)
    env = {"NANOBOT_RETRY_BASE_DELAY": "0.01"}
    # large enough that nanobot counts it (a request that surely fits is not counted, nothing learned)
    big = "please summarise: " + " ".join(f"line {i} of the log says ok" for i in range(600))

    def entry() -> object:
        path = calibration_path()
        return json.loads(path.read_text()).get("custom/test-model") if path.exists() else None

    with FakeLLMServer() as other:
        other.prompt_counter = lambda prompt: 3 * count_prompt_tokens(prompt, encode)
        other.script(Reply.text("from the fallback"))
        _serve_fallbacks(
            isolated_home, {"other": other}, [{"model": "other-model", "provider": "other"}]
        )
        fake_llm.script(Reply.text("from the primary"))  # counted as the fake server counts
        first = nanobot_run("agent", "-s", "cli:one", "-m", big, env=env)
        assert first.returncode == 0, first.stderr
        before = entry()
        fake_llm.responder = lambda request: Reply.error(503)
        served = nanobot_run("agent", "-s", "cli:two", "-m", big, env=env)
        fake_llm.responder = None
        assert served.stdout.strip() == "from the fallback", served.stderr
        assert other.requests[0].reply is not None
        after = entry()
        fake_llm.script(Reply.text("from the primary again"))
        again = nanobot_run("agent", "-s", "cli:three", "-m", big, env=env)
        assert again.stdout.strip() == "from the primary again", again.stderr
    assert before is not None and after == before  # what was learned of the primary stays
    sent = fake_llm.requests
    assert len(sent) == 6  # run one, four tries in run two, run three
    # the same request in a fresh session is sent the same (the fallback's ratio of 3 would have had
    # nanobot cut the message to fit, saving it whole in the inbox, and lower the reply room)
    # (within a few tokens: the system prompt names the session and the time)
    assert abs(sent[-1].estimated_tokens - sent[0].estimated_tokens) <= 16
    assert sent[-1].body["max_tokens"] == sent[0].body["max_tokens"] == 4096
    assert "too large for the context window" not in again.stderr
