"""The one ContextBudget as everyone uses it: pointer receipts, the prompt cap, subagents, overflow
recovery and the /status figures (in-process, real SDKs against the fake server)."""

from __future__ import annotations

import json

import pytest
from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore

from budget_helpers import (
    WINDOW,
    EchoTool,
    is_consolidation,
    make_strict,
    make_text,
    over_window,
    save_memory_reply,
    talk,
    write_session,
)

# -- a pointer that cannot be right ------------------------------------------------------------


def _chunked_session(store: SessionStore, last) -> None:
    msgs = []
    for i in range(6):
        msgs += [
            {"role": "user", "content": f"q{i}", "timestamp": f"2026-01-05T10:0{i}:00"},
            {"role": "assistant", "content": f"a{i}", "timestamp": f"2026-01-05T10:0{i}:30"},
        ]
    meta = {"_type": "metadata", "key": "k", "created_at": "2026-01-05T10:00:00"}
    lines = [
        dict(meta, last_consolidated=0),
        *msgs[:4],
        dict(meta, last_consolidated=2),
        dict(meta, last_consolidated=4),
        *msgs[4:],
        dict(meta, last_consolidated=last),
    ]
    store.directory.mkdir(parents=True, exist_ok=True)
    store.path_for("k").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.mark.parametrize("bad", [10**6, -1, True, "4", None, 4.0])
@pytest.mark.parametrize(
    "stamps, proven",
    [
        ({"2026-01-05 10:00", "2026-01-05 10:01"}, 4),  # both chunks have their entries
        (
            {"2026-01-05 10:00"},
            2,
        ),  # only the first chunk's entry: the second may never have been written
        (
            {"2026-01-05 10:01"},
            4,
        ),  # the last chunk's entry proves it (chunks are recorded in order)
        (set(), 0),
    ],
)
def test_a_bad_pointer_falls_back_to_the_last_position_history_proves(
    tmp_path, bad, stamps, proven
):
    store = SessionStore(tmp_path / "s", receipts=lambda: stamps)
    _chunked_session(store, bad)
    session = store.open("k")
    assert session.last_consolidated == proven
    assert [w for w in session.warnings if "pointer" in w] and len(session.warnings) == 1
    store.close(session)
    again = store.open("k")
    assert again.last_consolidated == proven and again.warnings == []
    store.close(again)


def test_a_good_pointer_is_kept_whatever_history_says(tmp_path):
    store = SessionStore(tmp_path / "s", receipts=lambda: set())
    _chunked_session(store, 6)
    session = store.open("k")
    assert session.last_consolidated == 6 and session.warnings == []
    store.close(session)


# -- the optional prompt cap ---------------------------------------------------------------------


def test_context_block_limit_caps_every_prompt_and_consolidates_under_it(configure, fake_llm):
    from nanobot.config import load_config

    configure(contextWindowTokens=65_536, contextBlockLimit=5000)
    make_strict(fake_llm, 65_536)
    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("noted")
    )
    cfg = load_config(None)
    history = []
    for i in range(30):
        history += [
            {"role": "user", "content": f"turn {i}: " + make_text("prose", 400, i)},
            {"role": "assistant", "content": make_text("prose", 400, i + 1)},
        ]
    write_session(SessionStore(), "cli:direct", history)

    async def go(assistant):
        snap = assistant.conversation.snapshot()
        out = await assistant.conversation.send("and what now?")
        return snap, out, assistant.conversation.session.last_consolidated

    snap, out, pointer = talk(cfg, go)
    assert not out.error and pointer > 0
    assert snap.budget == 5000 and snap.reply_tokens == 8192 and snap.prompt_cap == 5000
    turns = [r for r in fake_llm.requests if not is_consolidation(r)]
    assert turns and all(r.estimated_tokens <= 5000 for r in fake_llm.requests)
    fake_llm.assert_all_valid()


def test_a_prompt_cap_below_the_fixed_prompt_is_refused_naming_the_cap():
    from nanobot.agent.budget import ContextBudget
    from nanobot.errors import ContextTooSmallError

    budget = ContextBudget(window=65_536, max_tokens=8192, prompt_cap=1500)
    with pytest.raises(ContextTooSmallError) as info:
        budget.check_fixed("fact " * 2000, None)
    assert (
        "more than the prompt cap of 1,500 (agents.defaults.contextBlockLimit)"
        in info.value.message
    )
    assert "contextBlockLimit" in info.value.hint and "window of" not in info.value.message


def test_context_block_limit_is_off_by_default():
    from nanobot.config import Config

    assert Config().defaults.context_block_limit == 0


# -- subagents ask the same budget ----------------------------------------------------------------


def test_subagent_requests_fit_the_window_too(configure, fake_llm):
    from nanobot.app import tool_context
    from nanobot.config import load_config

    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    task = "Summarise this log: " + make_text("hex", 60_000)

    def model(req):
        if is_consolidation(req):
            return save_memory_reply(req)
        system = (
            req.messages[0]["content"]
            if req.messages and req.messages[0]["role"] == "system"
            else ""
        )
        if "You are a subagent" in system:
            if req.messages[-1]["role"] == "tool":
                return Reply.text("the log is hex")
            return Reply.tool_calls([("echo", {"size": 80_000, "kind": "hex"})] * 3)
        last = json.dumps(req.messages[-1], ensure_ascii=False)
        if "background helper you started has ended" in last:
            return Reply.text("the helper says it is hex")
        if req.messages[-1]["role"] == "user" and "look at the log" in last:
            return Reply.tool_calls([("spawn", {"task": task, "label": "log"})])
        return Reply.text("started")

    fake_llm.responder = model
    cfg = load_config(None)

    async def go(assistant):
        conv = assistant.conversation
        assistant.subagents.tools.register(EchoTool(tool_context(cfg, cfg.workspace_path())))
        await conv.send("look at the log in the background")
        assert await assistant.subagents.wait(30)

    talk(cfg, go)
    sub = [r for r in fake_llm.requests if "You are a subagent" in json.dumps(r.messages[:1])]
    assert len(sub) >= 2
    assert over_window(fake_llm) == []
    fake_llm.assert_all_valid()


# -- overflow reported by the provider --------------------------------------------------------------


def test_a_smaller_real_window_is_learned_and_the_request_refitted(configure, fake_llm):
    from nanobot.agent.events import Notice
    from nanobot.cli.status_view import status_lines
    from nanobot.config import load_config

    configure(contextWindowTokens=32_768)  # the model really has 8,192
    make_strict(fake_llm, WINDOW)
    fake_llm.count_max_tokens = False  # this server, like some, checks the prompt alone
    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("fine")
    )
    cfg = load_config(None)
    history = [
        {"role": "user", "content": "turn: " + make_text("prose", 3000, i)}
        if i % 2 == 0
        else {"role": "assistant", "content": make_text("prose", 3000, i)}
        for i in range(16)
    ]
    write_session(SessionStore(), "cli:direct", history)
    events: list = []

    async def go(assistant):
        out = await assistant.conversation.send("hello", emit=events.append)
        return out, assistant.conversation.snapshot(), status_lines(assistant)

    out, snap, lines = talk(cfg, go)
    assert not out.error, out.error
    rejected, accepted = fake_llm.requests[0], fake_llm.requests[-1]
    assert (
        rejected.estimated_tokens > WINDOW
        and accepted.estimated_tokens <= WINDOW - accepted.body["max_tokens"]
    )
    assert any(isinstance(e, Notice) and "working within 8,192 tokens" in e.text for e in events)
    assert snap.window == WINDOW and snap.configured_window == 32_768
    shown = "\n".join(lines)
    assert (
        f"window {WINDOW:,} (configured 32,768" in shown
        and "set agents.defaults.contextWindowTokens to 8,192" in shown
    )
    assert accepted.body["max_tokens"] == snap.reply_tokens


def test_an_overflow_that_persists_names_the_real_cause(configure, fake_llm):
    from nanobot.config import load_config

    configure(contextWindowTokens=WINDOW)
    too_long = Reply.error(
        400, message="prompt is too long for this model"
    )  # no numbers to learn from
    fake_llm.script(too_long, too_long)
    cfg = load_config(None)

    async def go(assistant):
        return await assistant.conversation.send("hi")

    out = talk(cfg, go)
    assert len(fake_llm.requests) == 2  # today's recovery: shrink, refit, send once more
    assert out.error and "the provider counted more tokens than nanobot estimated" in out.error
    assert "fits each request to 6,553 tokens" in out.error  # the window it shrank to
    assert "contextWindowTokens" in out.error and "no repair is needed" in out.error
    assert "bug in nanobot" not in out.error


def test_a_provider_that_counts_far_more_gets_a_refusal_that_says_so(configure, fake_llm):
    from nanobot.config import load_config
    from nanobot.fakellm.rules import count_prompt_tokens
    from nanobot.tokens import load_offline_encoding

    configure(contextWindowTokens=WINDOW)
    encode = load_offline_encoding()[0]
    fake_llm.context_window = WINDOW
    fake_llm.prompt_counter = lambda prompt: (
        3 * count_prompt_tokens(prompt, encode)
    )  # a far hungrier tokenizer
    cfg = load_config(None)

    async def go(assistant):
        return await assistant.conversation.send("hi " + make_text("prose", 4000))

    out = talk(cfg, go)
    assert (
        len(fake_llm.requests) == 1
    )  # after learning the real count, the refitted request was not sent
    assert out.error and "not sent" in out.error and "the provider counts about 2.0x" in out.error
    assert "bug in nanobot" not in out.error


# -- /status agrees with the request that follows -----------------------------------------------------


def test_status_shows_what_the_next_request_uses(configure, fake_llm):
    from nanobot.agent.consolidation import DEFAULT_PROBE
    from nanobot.cli.status_view import status_lines
    from nanobot.config import load_config

    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    fake_llm.script(Reply.text("first"), Reply.text("second"))
    cfg = load_config(None)

    async def go(assistant):
        await assistant.conversation.send("hello there")
        snap = assistant.conversation.snapshot()
        lines = status_lines(assistant)
        await assistant.conversation.send(DEFAULT_PROBE)  # the message the estimate assumes
        return snap, lines

    snap, lines = talk(cfg, go)
    shown = "\n".join(lines)
    request = fake_llm.requests[-1]
    assert (
        f"~{snap.estimate:,} / {snap.budget:,} tokens (window 8,192 minus 2,048 kept for the reply)"
        in shown
    )
    assert request.body["max_tokens"] == snap.reply_tokens == 2048
    assert request.estimated_tokens <= snap.estimate <= request.estimated_tokens + 40


@pytest.mark.parametrize(
    "message",
    [
        "input length and `max_tokens` exceed context limit: 8123 + 2048 > 8192, decrease input length or "
        "`max_tokens` and try again",
        "This model's maximum context length is 8192 tokens. However, you requested 10171 tokens (8123 in the "
        "messages, 2048 in the completion). Please reduce the length of the messages or completion.",
    ],
)
def test_prompt_plus_max_tokens_rejections_are_read_as_overflows(message):
    from nanobot.providers.errors_map import status_error

    error = status_error("provider", 400, message)
    assert (
        error.context_overflow and error.reported_window == 8192 and error.reported_tokens == 8123
    )
    assert "bug in nanobot" not in str(error)
