"""Fixtures for the exec security tests (helpers live in canaries.py)."""

from __future__ import annotations

import pytest
from canaries import MECHANISMS, CanaryTCP, CanaryUDP, confinement_or_skip


@pytest.fixture(params=MECHANISMS)
def confinement(request):
    """Each test runs once under bubblewrap and once under Landlock (skipped where missing)."""
    return confinement_or_skip(request.param)


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
