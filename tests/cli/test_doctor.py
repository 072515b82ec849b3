"""`nanobot doctor` through the real command: all checks pass on a good setup, each failure explains its fix."""

from __future__ import annotations

import json
import os

import pytest


def doctor(nanobot_run, *args):
    return nanobot_run("doctor", *args)


def lines_by_check(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        if line[:1] in "✓!✗":
            name = line[2:20].strip()
            out[name] = line
    return out


def set_config(path, **changes):
    data = json.loads(path.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "protocol, route", [("openai", "/v1/models"), ("anthropic", "/v1/models/claude-test")]
)
def test_doctor_passes_on_a_good_setup_with_one_cheap_request(
    nanobot_run, fake_llm, configure, protocol, route
):
    path = configure(protocol)
    fake_llm.models = [
        "custom/test-model",
        "claude-test",
    ]  # with provider "custom" the name goes as written
    set_config(
        path, **{"tools.exec.enable": False}
    )  # confinement then passes with or without bwrap
    result = doctor(nanobot_run)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = lines_by_check(result.stdout)
    assert list(checks) == [
        "config",
        "api key",
        "provider",
        "token counter",
        "exec confinement",
        "workspace",
        "sessions",
        "memory",
        "skills",
        "compaction",
    ]
    assert all(line[0] in "✓!" for line in checks.values()), result.stdout
    assert "parses (mode 0600)" in checks["config"]
    assert "answers and has" in checks["provider"] and "all checks passed" in result.stdout
    assert fake_llm.model_requests == [route] and fake_llm.requests == []  # no tokens spent


def test_doctor_explains_each_failure_and_offline_contacts_nobody(
    nanobot_run, fake_llm, configure, isolated_home
):
    path = configure()
    fake_llm.models = ["custom/test-model"]
    set_config(path, **{"agents.defaults.model": "custom/tset-model", "tools.exec.enable": False})
    os.chmod(path, 0o644)
    (isolated_home / "sessions").write_text("not a folder")
    result = doctor(nanobot_run)
    assert result.returncode == 1
    checks = lines_by_check(result.stdout)
    assert checks["config"].startswith("✗") and "mode is 0644" in checks["config"]
    assert (
        checks["provider"].startswith("✗")
        and "has no model 'custom/tset-model'" in checks["provider"]
    )
    assert checks["sessions"].startswith("✗") and "not writable" in checks["sessions"]
    assert "chmod 600" in result.stdout and "Close: custom/test-model" in result.stdout
    assert "3 check(s) failed: config, provider, sessions" in result.stdout
    fake_llm.model_requests.clear()
    offline = doctor(nanobot_run, "--offline")
    assert "not contacted (--offline)" in lines_by_check(offline.stdout)["provider"]
    assert fake_llm.model_requests == [] and fake_llm.requests == []


def test_doctor_reports_an_unreachable_provider_with_its_url(nanobot_run, configure, isolated_home):
    path = configure()
    set_config(path, **{"providers.custom.apiBase": "http://127.0.0.1:9/v1"})
    result = doctor(nanobot_run)
    assert result.returncode == 1
    line = lines_by_check(result.stdout)["provider"]
    assert line.startswith("✗") and "could not connect to http://127.0.0.1:9/v1" in line
    assert (
        "exec confinement" in result.stdout
    )  # reported either way; its status depends on the machine
