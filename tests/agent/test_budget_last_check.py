"""The budget's last check (ContextBudget.last_check, WindowGuard): every request that leaves asks for
prompt + max_tokens within the window, as the provider counts it, whoever built the request.

The property feeds it mismatches it can meet: a max_tokens above the reply room (`memory tidy`
asked for maxTokens whole), a prompt built without fitting, a provider that counts more than
nanobot's tokenizer (learned by calibration), through both real adapters to a strict fake server.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanobot.agent.budget import MIN_REPLY_TOKENS, ContextBudget, WindowGuard
from nanobot.errors import RequestTooLarge
from nanobot.fakellm import Reply
from nanobot.fakellm.rules import count_prompt_tokens

from budget_helpers import exact_encode, make_strict, make_text, over_window
from scripted_llm import ScriptedLLM


def _request(sizes: list[tuple[str, int]]) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are nanobot."}]
    for n, (kind, chars) in enumerate(sizes):
        msgs.append({"role": "user", "content": f"question {n}: " + make_text(kind, chars, n)})
        msgs.append({"role": "assistant", "content": f"answer {n}"})
    msgs.append({"role": "user", "content": "and now?"})
    return msgs


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from([4096, 8192, 16384]),
    st.lists(
        st.tuples(st.sampled_from(["prose", "hex", "json", "cjk"]), st.integers(0, 12_000)),
        max_size=5,
    ),
    st.integers(1, 20_000),
    st.floats(1.0, 1.6),
    st.sampled_from(["openai", "anthropic"]),
)
def test_no_request_leaves_over_the_window(window, sizes, max_tokens, provider_ratio, protocol):
    budget = ContextBudget(window=window, max_tokens=8192)
    server = ScriptedLLM()
    make_strict(server, window)
    # this provider counts `provider_ratio` times what the wire holds; an earlier answer taught the budget so
    encode = exact_encode()
    server.prompt_counter = lambda prompt: math.ceil(
        count_prompt_tokens(prompt, encode) * provider_ratio
    )
    budget.observe(1000, math.ceil(1000 * provider_ratio))
    server.responder = lambda req: Reply.text("ok")
    request = _request(sizes)

    async def send() -> None:
        guard = WindowGuard(server.provider(protocol), budget)
        try:
            await guard.chat(request, max_tokens=max_tokens)
        finally:
            await guard.aclose()

    try:
        asyncio.run(send())
    except RequestTooLarge:
        assert not server.requests  # refused: nothing was sent
        return
    assert len(server.requests) == 1 and not over_window(server, window), over_window(
        server, window
    )
    asked = server.requests[0].body["max_tokens"]
    assert min(MIN_REPLY_TOKENS, budget.reply_tokens, max_tokens) <= asked <= max_tokens


def test_a_request_that_fits_leaves_unchanged():
    budget = ContextBudget(window=8192, max_tokens=2048)
    request = _request([("prose", 2000)])
    assert budget.last_check(request, None, 2048) == (request, 2048)


def test_when_the_floor_does_not_fit_history_is_cut_through_the_budget():
    budget = ContextBudget(window=4096, max_tokens=1024)
    request = _request([("prose", 9000), ("hex", 9000), ("prose", 3000)])
    sent, asked = budget.last_check(request, None, 4096)
    assert (
        sent[-1] == request[-1] and sent != request
    )  # cut for this request (the caller's list is untouched)
    assert request == _request([("prose", 9000), ("hex", 9000), ("prose", 3000)])
    assert budget.tokens(sent) + asked <= 4096 and asked >= MIN_REPLY_TOKENS


def test_nothing_fits_raises_before_sending():
    budget = ContextBudget(window=4096, max_tokens=1024)
    with pytest.raises(RequestTooLarge):
        budget.last_check(
            [
                {"role": "system", "content": make_text("hex", 40_000)},
                {"role": "user", "content": "hi"},
            ],
            None,
            1024,
        )


def test_memory_tidy_at_an_8k_window_asks_within_it(
    configure, isolated_home, fake_llm, nanobot_run
):
    """`memory tidy` sent maxTokens (8,192) as it was, beside a prompt, to an 8,192-token model."""
    from nanobot.memory.store import MemoryStore

    configure(contextWindowTokens=8192, maxTokens=8192)
    make_strict(fake_llm, 8192)
    store = MemoryStore(isolated_home / "workspace")
    store.write_memory(
        "# Memory\n- The user lives in Porto.\n- The user lives in Lisbon.\n", reason="setup"
    )
    for day in range(1, 29):
        store.append_history(f"[2026-02-{day:02d} 18:00] " + make_text("prose", 600, day))
    fake_llm.script(Reply.text("# Memory\n- The user lives in Lisbon.\n"))
    result = nanobot_run("memory", "tidy", "--yes")
    assert result.returncode == 0, result.stderr
    assert store.read_memory() == "# Memory\n- The user lives in Lisbon.\n"
    assert len(fake_llm.requests) == 1 and not over_window(fake_llm, 8192), over_window(
        fake_llm, 8192
    )
    fake_llm.assert_all_valid()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.floats(0.9, 1.3), min_size=2, max_size=10),
    st.integers(1000, 8000),
    st.floats(0.0, 1.0),
    st.sampled_from(["openai", "anthropic"]),
)
def test_a_provider_counting_above_the_learned_ratio_by_a_seen_surprise_still_fits(
    ratios, chars, where, protocol
):
    """A provider not proportional to nanobot's tokenizer: each request counts at its own ratio. The
    150-turn workload against a server counting JSON characters / 4 had one request in ~300 land 4-17
    tokens over the window this way (seeds 6 and 7 of /tmp hunts; see the report). The next request
    may count above the calibrated ratio by as much as the largest recent surprise: it still fits."""
    budget = ContextBudget(window=8192, max_tokens=8192)
    for r in ratios:  # earlier answers, each at its own ratio
        budget.observe(1000, math.ceil(1000 * r))
    calibrated, margin = budget.calibration.ratio, budget.calibration.margin
    true_ratio = calibrated + where * margin
    request = [
        {"role": "system", "content": "You are nanobot."},
        {"role": "user", "content": make_text("prose", chars)},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": make_text("json", 20_000)},
    ]
    fitted = budget.fit(request)  # as the loop fits it: to the calibrated budget, no margin
    server = ScriptedLLM()
    make_strict(server, 8192)
    server.prompt_counter = lambda prompt: math.floor(
        count_prompt_tokens(prompt, exact_encode()) * true_ratio
    )
    server.responder = lambda req: Reply.text("ok")

    async def send() -> None:
        guard = WindowGuard(server.provider(protocol), budget)
        try:
            await guard.chat(fitted.messages, max_tokens=fitted.max_tokens)
        finally:
            await guard.aclose()

    asyncio.run(send())
    assert not over_window(server, 8192), (over_window(server, 8192), calibrated, margin)
