"""Fixtures for the exec security tests (helpers live in canaries.py)."""

from __future__ import annotations

import pytest

from canaries import MECHANISMS, CanaryTCP, CanaryUDP, by_mechanism, confinement_or_skip


@pytest.fixture(params=by_mechanism(MECHANISMS))
def confinement(request):
    """Each test runs once under bubblewrap and once under Landlock (skipped where missing; the one
    auto does not pick here is the thorough tier's)."""
    return confinement_or_skip(request.param)


@pytest.fixture
def loopback_egress(monkeypatch):
    """exec's egress proxy resolves every name to 127.0.0.1 (the canary) and may reach it: a seam no
    setting reaches. Returns the host a command should name: "canary.test" (whose domain still needs
    approving: tools.web.allowDomains, or asked), or the canary's address where no proxy is used."""
    from nanobot.sandbox import choose
    from nanobot.tools import egress_proxy
    from nanobot.tools.safe_http import AddressPolicy, SafeFetcher

    async def to_canary(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    monkeypatch.setattr(
        egress_proxy,
        "default_checker",
        lambda: SafeFetcher(AddressPolicy.allowing("127.0.0.1/32"), resolver=to_canary),
    )
    return "canary.test" if choose().filters_egress else "127.0.0.1"


@pytest.fixture
def canary_tcp():
    server = CanaryTCP()
    yield server
    server.close()


@pytest.fixture
def canary_udp():
    server = CanaryUDP()
    yield server
    server.close()
