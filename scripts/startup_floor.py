"""The floor under `nanobot agent -m hi` with the official SDK: Python's start-up, `import openai`,
one streamed request through the SDK's low-level client, the answer read, one fsync'd append.

    python scripts/startup_floor.py http://127.0.0.1:PORT/v1 FILE [--on-demand]

With --on-demand the SDK is imported as nanobot imports it: its re-export packages load on demand
(nanobot/providers/_sdk_on_demand.py). bench.py --vs runs both beside the two nanobots, so the table
shows how much of a one-shot turn is this floor and how much is nanobot's own work. It prints
nothing; it is timed from outside.
"""

import asyncio
import os
import sys

if "--on-demand" in sys.argv:
    from nanobot.providers import _sdk_on_demand

    _sdk_on_demand.install()

import httpx2  # noqa: E402
import openai  # noqa: E402


async def main(base_url: str) -> None:
    client = openai.AsyncOpenAI(api_key="sk-floor", base_url=base_url, max_retries=0)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = await client.post(
        "/chat/completions",
        body=body,
        cast_to=httpx2.Response,
        options={"headers": {"X-Stainless-Raw-Response": "stream"}},
    )
    async for _ in response.aiter_bytes():
        pass
    await response.aclose()


asyncio.run(main(sys.argv[1]))
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.write(fd, b'{"role": "assistant", "content": "hello"}\n')
os.fsync(fd)
os.close(fd)
