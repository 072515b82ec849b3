"""`nanobot onboard` in a terminal asks for the model's missing API key and keeps it in the config
(nanobot/cli/key_prompt.py); a script, a skip, Ctrl-C or a key the file refers to leave the file as it was."""

from __future__ import annotations

import json
import stat

from nanobot.fakellm import Reply
from tests.cli.terminal import Terminal

TYPED = "sk-ant-typed-at-the-prompt-4242"


def _config(isolated_home, fake_llm, **anthropic) -> dict:
    """A config the user started by hand: the fake server as Anthropic's endpoint, no key yet."""
    data = {
        "agents": {"defaults": {"model": "anthropic/claude-test", "temperature": 0.3}},
        "providers": {"anthropic": {"apiBase": fake_llm.anthropic_base_url, **anthropic}},
        "myNotes": "kept as written",
    }
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "config.json").write_text(json.dumps(data))
    return data


def _saved(isolated_home) -> dict:
    return json.loads((isolated_home / "config.json").read_text())


def test_the_key_typed_at_onboard_is_not_shown_is_saved_privately_and_the_chat_then_uses_it(
    isolated_home, fake_llm, nanobot_run
):
    _config(isolated_home, fake_llm)
    term = Terminal("onboard")
    try:
        term.wait_for("API key (not shown):")
        assert "providers.anthropic.apiKey" in term.text() and "ANTHROPIC_API_KEY" in term.text()
        term.child.send(TYPED + "\r")
        term.wait_for("ready. Start chatting with: nanobot agent")
        assert term.finish() == 0
    finally:
        term.close()
    assert TYPED not in term.drawn()  # never echoed
    saved = _saved(isolated_home)
    assert saved["providers"]["anthropic"]["apiKey"] == TYPED
    assert saved["providers"]["anthropic"]["apiBase"] == fake_llm.anthropic_base_url
    assert (
        saved["agents"]["defaults"]["temperature"] == 0.3 and saved["myNotes"] == "kept as written"
    )
    assert stat.S_IMODE((isolated_home / "config.json").stat().st_mode) == 0o600

    fake_llm.script(Reply.text("hello with your key"))
    chat = nanobot_run("agent", "-m", "hi")
    assert chat.returncode == 0 and chat.stdout.strip() == "hello with your key", chat.stderr
    headers = fake_llm.requests[0].headers
    assert TYPED in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )


def test_a_skip_ctrl_c_or_a_value_with_spaces_saves_nothing(isolated_home, fake_llm):
    written = _config(isolated_home, fake_llm)
    for keys, code, said in (
        ("\r", 0, "skipped: no key saved"),
        ("\x03", 130, "interrupted: no key saved"),
        ("sk-ant two words\r", 0, "not saved: that has spaces"),
    ):
        term = Terminal("onboard")
        try:
            term.wait_for("API key (not shown):")
            term.child.send(keys)
            term.wait_for(said)
            assert term.finish() == code
        finally:
            term.close()
        assert _saved(isolated_home)["providers"]["anthropic"].get("apiKey", "") == ""
    assert _saved(isolated_home)["myNotes"] == written["myNotes"]


def test_in_a_script_or_with_a_key_the_file_refers_to_onboard_asks_nothing(
    isolated_home, fake_llm, nanobot_run
):
    _config(isolated_home, fake_llm)
    piped = nanobot_run(
        "onboard", input=TYPED + "\n"
    )  # stdin a pipe: the hint, and the input left unread
    assert piped.returncode == 0 and "hint: Set ANTHROPIC_API_KEY" in piped.stdout
    assert (
        _saved(isolated_home)["providers"]["anthropic"]["apiKey"] == ""
    )  # onboard's default, not the input

    # a reference to an empty variable: the hint, never the prompt; to an unset one: the config's error
    for value, code, said in (
        ("", 0, "hint: Set ANTHROPIC_API_KEY"),
        (None, 2, "variable that is not set"),
    ):
        _config(isolated_home, fake_llm, apiKey="${MY_ANTHROPIC_KEY}")
        term = Terminal("onboard", env={"MY_ANTHROPIC_KEY": value} if value is not None else None)
        try:
            term.wait_for(said)
            assert term.finish() == code
        finally:
            term.close()
        assert "API key (not shown)" not in term.text()
        assert _saved(isolated_home)["providers"]["anthropic"]["apiKey"] == "${MY_ANTHROPIC_KEY}"


def test_the_missing_key_hint_names_the_config_file_in_use(isolated_home, tmp_path, nanobot_run):
    other = tmp_path / "other-config.json"
    other.write_text(json.dumps({"agents": {"defaults": {"temperature": 0.2}}}))
    other.chmod(0o600)
    result = nanobot_run("agent", "-m", "hi", "--config", str(other), "--model", "openrouter/x")
    assert result.returncode == 2
    hint = " ".join(result.stderr.split())
    assert f"providers.openrouter.apiKey in {other}." in hint and str(isolated_home) not in hint


def test_the_chat_without_onboard_asks_too_and_a_skip_ends_it_with_the_usual_error(
    isolated_home, fake_llm
):
    """`nanobot agent` in a terminal with no config file at all: asked, the key saved in a new
    complete config (mode 0600), the chat starts and the provider gets the key; skipped, the chat
    ends with the missing-key error (exit 2) and no file is written."""
    env = {
        "NANOBOT_PROVIDERS__ANTHROPIC__API_BASE": fake_llm.anthropic_base_url,
        "NANOBOT_AGENTS__DEFAULTS__MODEL": "anthropic/claude-test",
    }
    term = Terminal("agent", env=env)
    try:
        term.wait_for("API key (not shown):")
        term.child.send("\r")
        term.wait_for("error: no API key for provider 'anthropic'")
        assert term.finish() == 2
    finally:
        term.close()
    assert not (isolated_home / "config.json").exists()

    fake_llm.script(Reply.text("hello in the chat"))
    term = Terminal("agent", env=env)
    try:
        term.wait_for("API key (not shown):")
        term.child.send(TYPED + "\r")
        term.wait_for("you ›")
        term.send("hi")
        term.wait_for("hello in the chat")
        term.send("/exit")
        assert term.finish() == 0
    finally:
        term.close()
    assert TYPED not in term.drawn()
    assert _saved(isolated_home)["providers"]["anthropic"]["apiKey"] == TYPED
    assert stat.S_IMODE((isolated_home / "config.json").stat().st_mode) == 0o600
    headers = fake_llm.requests[0].headers
    assert TYPED in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )
