"""The meter on the provider seam: what a call costs is on the ledger, however the call ended."""

from __future__ import annotations

import asyncio

from nanobot.config import UsageLimits
from nanobot.fakellm import Reply
from nanobot.providers.openai_compat import OpenAICompatProvider
from nanobot.usage.ledger import read_records
from nanobot.usage.meter import MeteredProvider, UsageMeter

WORDS = "the replica stays until Friday and the schema diff runs against staging " * 40


def test_a_call_cancelled_mid_answer_is_recorded_with_its_prompt_and_what_streamed(
    fake_llm, tmp_path
):
    # Ctrl-C in the middle of a streamed answer: the provider was sent the prompt and streamed part of
    # the answer, and bills both, but never sends its usage (it comes at the end of the stream)
    fake_llm.script(Reply.text(WORDS, chunks=60, pace=0.05))
    meter = UsageMeter(UsageLimits(), tmp_path)
    inner = OpenAICompatProvider(
        "test-model", name="custom", api_key="sk-test-key-123456", api_base=fake_llm.openai_base_url
    )
    provider = MeteredProvider(
        inner, meter, source="chat", session="cli:direct", model="custom/test-model"
    )
    prompt = [{"role": "user", "content": "tell me about the migration plan " * 200}]
    shown: list[str] = []

    async def run() -> None:
        call = asyncio.ensure_future(provider.chat(prompt, on_delta=shown.append))
        while len(shown) < 5:
            await asyncio.sleep(0.01)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        await provider.aclose()

    asyncio.run(run())
    meter.close()
    [record] = read_records(tmp_path)
    assert record.outcome == "cancelled" and record.estimated
    assert record.prompt >= 1000  # the prompt of ~1,400 tokens was sent, and billed
    assert 0 < record.completion < 400  # what streamed before the cancel, not the whole answer
    assert shown  # the text still reached the screen through the meter


def test_each_streamed_attempt_the_provider_bills_is_a_record_and_a_refused_one_is_not(
    fake_llm, tmp_path
):
    # a stream the network cut after part of the answer: billed (prompt + what streamed); a 429: not
    # processed, not billed; then the answer
    from nanobot.providers.retry import RetryingProvider, RetryPolicy

    fake_llm.script(
        Reply.cut_stream(WORDS[:800]),
        Reply.error(429, message="slow down"),
        Reply.text("done", usage={"prompt_tokens": 1500, "completion_tokens": 2}),
    )
    meter = UsageMeter(UsageLimits(), tmp_path)
    inner = OpenAICompatProvider(
        "test-model", name="custom", api_key="sk-test-key-123456", api_base=fake_llm.openai_base_url
    )
    provider = MeteredProvider(
        RetryingProvider(inner, RetryPolicy(base_delay=0)),
        meter,
        source="chat",
        session="cli:direct",
        model="custom/test-model",
    )
    prompt = [{"role": "user", "content": "tell me about the migration plan " * 200}]
    shown: list[str] = []

    async def run() -> None:
        await provider.chat(prompt, on_delta=shown.append)
        await provider.aclose()

    asyncio.run(run())
    meter.close()
    assert len(fake_llm.requests) == 3
    cut, answered = read_records(tmp_path)
    assert (cut.outcome, cut.estimated) == ("cut", True)
    assert cut.prompt >= 1000  # the prompt of ~1,400 tokens was sent, and billed
    assert 100 < cut.completion < 250  # the ~160 tokens that streamed before the cut
    assert (answered.outcome, answered.prompt, answered.completion) == ("ok", 1500, 2)


def test_a_cut_attempt_of_a_fallback_model_is_recorded_under_that_model(fake_llm, tmp_path):
    # the primary cannot be reached (never sent: not recorded); the fallback's first stream is cut
    from nanobot.providers.fallback import Candidate, FallbackProvider
    from nanobot.providers.retry import RetryingProvider, RetryPolicy

    fake_llm.script(Reply.cut_stream(WORDS[:400]), Reply.text("from the backup"))

    def adapter(base: str) -> OpenAICompatProvider:
        return OpenAICompatProvider("m", name="custom", api_key="sk-test-key-123456", api_base=base)

    policy = RetryPolicy(attempts=2, base_delay=0)
    chain = [
        Candidate("custom/main", RetryingProvider(adapter("http://127.0.0.1:1/v1"), policy)),
        Candidate(
            "custom/backup",
            RetryingProvider(adapter(fake_llm.openai_base_url), policy, label="custom/backup"),
        ),
    ]
    meter = UsageMeter(UsageLimits(), tmp_path)
    provider = MeteredProvider(
        FallbackProvider(chain), meter, source="chat", session="cli:direct", model="custom/main"
    )

    async def run() -> None:
        await provider.chat([{"role": "user", "content": "hi " * 600}], on_delta=lambda t: None)
        await provider.aclose()

    asyncio.run(run())
    meter.close()
    cut, answered = read_records(tmp_path)
    assert (cut.outcome, cut.model, cut.completion > 0) == ("cut", "custom/backup", True)
    assert (answered.outcome, answered.model) == ("ok", "custom/backup")
