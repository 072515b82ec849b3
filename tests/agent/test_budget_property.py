"""Property: whatever the session holds, the user pastes or the model asks for, every request fits.

Random sessions (with the damage issue 12 lists: long answers, oversized stored tool results,
messages with dozens of tool calls, long arguments, impossible pointers), a random next message
(up to a 150 KB paste), random tool output and model replies asking for many calls, on both
protocols. The fake server sizes each prompt with cl100k like a provider and rejects
prompt + max_tokens over the window; every request it received must be inside and valid.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from nanobot.fakellm import Reply
from nanobot.messages import tool_call

from budget_helpers import (
    EchoTool,
    is_consolidation,
    make_strict,
    make_text,
    over_window,
    save_memory_reply,
    write_session,
)

KINDS = st.sampled_from(["prose", "hex", "cjk", "json"])
stored_turn = st.fixed_dictionaries(
    {
        "user": st.sampled_from([5, 300, 3000]),
        "calls": st.sampled_from([0, 1, 3, 40]),
        "args": st.sampled_from([10, 2000, 30_000]),
        "result": st.sampled_from([50, 5000, 20_000, 60_000]),
        "answer": st.sampled_from([0, 200, 16_000]),
        "kind": KINDS,
    }
)
step = st.one_of(
    st.tuples(
        st.just("calls"),
        st.sampled_from([1, 2, 45]),
        st.sampled_from([0, 5000, 40_000]),
        st.sampled_from([0, 3000, 80_000]),
        KINDS,
    ),
    st.tuples(st.just("text"), st.sampled_from([20, 3000, 16_000]), st.just(0), st.just(0), KINDS),
)
_keys = itertools.count()


def _stored(turns: list[dict]) -> list[dict]:
    msgs: list[dict] = []
    for n, t in enumerate(turns):
        msgs.append({"role": "user", "content": f"turn {n}: " + make_text(t["kind"], t["user"], n)})
        if t["calls"]:
            ids = [f"s{n}_{k}" for k in range(t["calls"])]
            args = {"text": make_text(t["kind"], t["args"], n + 1)}
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [tool_call(i, "echo", args) for i in ids],
                }
            )
            msgs += [
                {
                    "role": "tool",
                    "tool_call_id": i,
                    "name": "echo",
                    "content": make_text(t["kind"], t["result"], n + 2),
                }
                for i in ids
            ]
        if t["answer"]:
            msgs.append({"role": "assistant", "content": make_text("prose", t["answer"], n + 3)})
    return msgs


class Model:
    """Plays the plan for turn requests (tool calls echoing the user's text, then text); summarises memory."""

    def __init__(self, plan: list[tuple], user_text: str) -> None:
        self.plan = list(plan)
        self.user_text = user_text

    def __call__(self, req) -> Reply:
        if is_consolidation(req):
            return save_memory_reply(req)
        if not self.plan:
            return Reply.text("done")
        kind, n, arg_size, out_size, text_kind = self.plan.pop(0)
        if kind == "text":
            return Reply.text(make_text("prose", n))
        args = {"text": self.user_text[:arg_size], "size": out_size, "kind": text_kind}
        return Reply.tool_calls([("echo", args)] * n)


# The fixed prompt (system, the always-on memory skill, ten tool schemas) is about 3k tokens, so at
# 8k a turn whose irreducible part (the user's message excerpt, its markers) is large may be refused
# as unsendable, which is correct but leaves nothing to check; 12k keeps every drawn case sendable.
PROPERTY_WINDOW = 12_288


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
# no shrinking: one example runs real SDK turns, and shrinking a failure would take minutes
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(
    turns=st.lists(stored_turn, max_size=5),
    pointer=st.sampled_from(["ok", -3, 10**6, True, "2", None]),
    message=st.tuples(KINDS, st.sampled_from([10, 2000, 20_000, 150_000])),
    plan=st.lists(step, max_size=3),
)
def test_every_request_fits_the_window_and_is_valid(
    protocol, configure, fake_llm, turns, pointer, message, plan
):
    from nanobot.app import open_assistant, tool_context
    from nanobot.config import load_config
    from nanobot.session.store import SessionStore

    configure(protocol, contextWindowTokens=PROPERTY_WINDOW)
    make_strict(fake_llm, PROPERTY_WINDOW)
    fake_llm.reset()
    cfg = load_config(None)
    key = f"cli:prop{next(_keys)}"
    stored = _stored(turns)
    write_session(SessionStore(), key, stored, len(stored) // 2 if pointer == "ok" else pointer)
    user_text = make_text(message[0], message[1], 99)
    fake_llm.responder = Model(plan, user_text)

    async def go():
        assistant = open_assistant(cfg, key, stream=protocol == "anthropic")
        assistant.conversation.tools.register(EchoTool(tool_context(cfg, cfg.workspace_path())))
        try:
            return await assistant.conversation.send(user_text)
        finally:
            await assistant.aclose()

    outcome = asyncio.run(go())
    assert not outcome.error, outcome.error
    assert fake_llm.requests, "nothing was sent"
    assert over_window(fake_llm, PROPERTY_WINDOW) == []
    fake_llm.assert_all_valid()
