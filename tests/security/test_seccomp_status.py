"""The seccomp filter exists for x86_64 and aarch64 only; elsewhere the sandbox's status line says
the setuid/setgid bits are not blocked, instead of silently lacking the filter."""

from __future__ import annotations

import platform

import pytest
from nanobot.sandbox import seccomp
from nanobot.sandbox.confine import Confinement


@pytest.fixture
def machine(monkeypatch):
    def pretend(name: str) -> None:
        monkeypatch.setattr(platform, "machine", lambda: name)
        seccomp.program.cache_clear()

    yield pretend
    seccomp.program.cache_clear()


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_the_status_line_says_when_this_architecture_has_no_filter(machine, mechanism):
    conf = Confinement(
        mechanism, "bubblewrap 0.8.0" if mechanism == "bwrap" else "Landlock ABI 7", "<= 512"
    )
    machine("riscv64")
    assert seccomp.program() is None
    line = conf.describe()
    assert (
        "setuid/setgid bits NOT blocked (no seccomp filter for riscv64, only for x86_64 and aarch64)"
        in line
    )
    if not seccomp._kernel_filters():
        pytest.skip("this kernel has no seccomp filters: no architecture gets one here")
    machine("x86_64")
    assert seccomp.program() is not None and "setuid" not in conf.describe()


def test_an_unconfined_status_line_does_not_mention_the_filter(machine):
    machine("riscv64")
    assert "setuid" not in Confinement("none", "no bwrap, no Landlock").describe()
