"""The real `nanobot` command: onboard, status, --version, the no-key message, import laziness."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

from nanobot.config import to_camel


def test_version(nanobot_run):
    result = nanobot_run("--version")
    assert result.returncode == 0 and result.stdout.startswith("nanobot ")


def test_version_and_help_do_not_import_provider_sdks():
    code = (
        "import sys; sys.argv=['nanobot', '{arg}'];\n"
        "from nanobot.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in ('openai', 'anthropic', 'tiktoken', 'httpx2') if m in sys.modules]\n"
        "print('LOADED', bad)"
    )
    for arg in ("--version", "--help"):
        out = subprocess.run(
            [sys.executable, "-c", code.format(arg=arg)], capture_output=True, text=True, timeout=60
        )
        assert "LOADED []" in out.stdout, (arg, out.stdout, out.stderr)


def test_onboard_creates_config_and_workspace_then_is_idempotent(nanobot_run, isolated_home):
    first = nanobot_run("onboard")
    assert first.returncode == 0, first.stderr
    config = isolated_home / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    workspace = isolated_home / "workspace"
    for name in ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "HEARTBEAT.md", "memory/MEMORY.md"):
        assert (workspace / name).is_file(), name
    (workspace / "USER.md").write_text("I am Ada.")
    data = json.loads(config.read_text())
    data["agents"]["defaults"]["temperature"] = 0.9
    config.write_text(json.dumps(data))
    second = nanobot_run("onboard")
    assert second.returncode == 0
    assert (workspace / "USER.md").read_text() == "I am Ada."
    assert json.loads(config.read_text())["agents"]["defaults"]["temperature"] == 0.9
    assert "left unchanged" in second.stdout


def test_onboard_refuses_to_touch_a_broken_config(nanobot_run, isolated_home):
    config = isolated_home / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"agents": ')
    result = nanobot_run("onboard")
    assert result.returncode == 2
    assert str(config) in result.stderr and "invalid JSON" in result.stderr
    assert "Traceback" not in result.stderr
    assert config.read_text() == '{"agents": '


def test_agent_without_a_key_exits_2_with_one_clear_message(nanobot_run):
    result = nanobot_run("agent", "-m", "hi")
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY" in result.stderr and "OPENAI_API_KEY" in result.stderr
    assert "nanobot onboard" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_config_value_exits_2_naming_the_key(nanobot_run, isolated_home):
    config = isolated_home / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"tools": {"exec": {"timeout": "soon"}}}))
    result = nanobot_run("agent", "-m", "hi")
    assert result.returncode == 2
    assert "tools.exec.timeout" in result.stderr and "Traceback" not in result.stderr


def test_status_masks_keys(nanobot_run):
    secret = "sk-ant-" + "x" * 30 + "TAIL"
    result = nanobot_run("status", env={"ANTHROPIC_API_KEY": secret})
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout and "sk-a…TAIL" in result.stdout
    assert "cl100k_base" in result.stdout  # which estimator is active
    assert "65,536" in result.stdout


def test_config_flag_picks_another_file(nanobot_run, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"agents": {"defaults": {"model": "ollama/qwen3"}}}))
    result = nanobot_run("status", "--config", str(other))
    assert result.returncode == 0 and "ollama/qwen3" in result.stdout


def test_status_shows_the_session_asked_for(nanobot_run, isolated_home):
    from nanobot.session.store import SessionStore

    store = SessionStore()
    session = store.open("work")
    store.append(session, [{"role": "user", "content": "Goal: ship BILL-4821"}])
    store.working_state_log(session).add_version("Goal: ship BILL-4821", archived=1)
    store.close(session)
    shown = " ".join(nanobot_run("status", "-s", "work").stdout.split())
    assert "session work " in shown and "version 1: 1 item" in shown
    default = " ".join(nanobot_run("status").stdout.split())
    assert "session cli:direct (new)" in default and "version 1" not in default


def test_camel_case_mapping():
    assert to_camel("context_window_tokens") == "contextWindowTokens"


def test_a_piped_one_shot_answer_does_not_load_the_markdown_renderer_or_the_command_groups(
    configure, fake_llm, nanobot_run
):
    from nanobot.fakellm import Reply

    configure()
    fake_llm.script(Reply.text("# Title\n\nSome *markdown*."))
    code = (
        "import sys; sys.argv=['nanobot', 'agent', '-m', 'hi']\n"
        "from nanobot.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', [m for m in ('rich.markdown', 'pygments', 'markdown_it', 'rich.status', *GROUPS) if m in sys.modules])"
    )
    groups = ", ".join(
        f"'nanobot.cli.{name}_cmd'" for name in ("session", "memory", "skills", "mcp", "cron")
    )
    out = subprocess.run(
        [sys.executable, "-c", f"GROUPS = [{groups}]\n" + code],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (
        "# Title\n\nSome *markdown*." in out.stdout
    )  # written as it came: stdout is not a terminal
    assert "LOADED []" in out.stdout, out.stderr
    listing = nanobot_run("--help").stdout  # the groups are still there for whoever asks
    assert all(
        f"{name} " in listing for name in ("session", "memory", "history", "skills", "mcp", "cron")
    )
    typo = nanobot_run("agnt")
    assert typo.returncode == 2 and "Did you mean 'agent'?" in typo.stderr


def test_status_shows_the_model_name_sent_and_a_prefix_naming_another_provider(
    nanobot_run, isolated_home
):
    isolated_home.mkdir(parents=True, exist_ok=True)
    config = isolated_home / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"provider": "openai"}}}))
    config.chmod(0o600)
    env = {"OPENAI_API_KEY": "sk-test-openai-0001"}
    same = nanobot_run("status", env={**env, "NANOBOT_AGENTS__DEFAULTS__MODEL": "openai/gpt-x"})
    assert same.returncode == 0, same.stderr
    assert "openai (default endpoint; the model is sent as gpt-x)" in same.stdout
    other = nanobot_run(
        "status", env={**env, "NANOBOT_AGENTS__DEFAULTS__MODEL": "anthropic/claude-x"}
    )
    shown = " ".join(other.stdout.split())
    assert (
        "model 'anthropic/claude-x' names provider anthropic, but agents.defaults.provider" in shown
    )
    assert 'set agents.defaults.provider to "auto"' in shown
