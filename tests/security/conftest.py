"""Fixtures for the exec security tests (helpers live in canaries.py)."""

from __future__ import annotations

import pytest
from canaries import MECHANISMS, CanaryTCP, CanaryUDP, confinement_or_skip


@pytest.fixture(params=MECHANISMS)
def confinement(request):
    """Each test runs once under bubblewrap and once under Landlock (skipped where missing)."""
    return confinement_or_skip(request.param)


@pytest.fixture
def loopback_egress(monkeypatch):
    """exec's egress proxy may reach 127.0.0.1 (the canary): a seam no setting reaches. A command
    allowed the network still needs the domain "127.0.0.1" approved (tools.web.allowDomains or asked)."""
    from nanobot.tools import egress_proxy
    from nanobot.tools.safe_http import AddressPolicy, SafeFetcher

    monkeypatch.setattr(egress_proxy, "default_checker", lambda: SafeFetcher(AddressPolicy.allowing("127.0.0.1/32")))


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
