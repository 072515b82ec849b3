"""A new user's first commands, with no key or the "wrong" one: every hint names a step that works."""

from __future__ import annotations

import re

from nanobot.fakellm import Reply
from tests.cli.terminal import Terminal


def _joined(text: str) -> str:
    return " ".join(text.split())  # hints wrap at the terminal's width


def test_an_openai_key_is_named_and_the_command_the_hint_gives_answers(
    nanobot_run, fake_llm, isolated_home
):
    env = {
        "OPENAI_API_KEY": "sk-openai-test-123456",
        "NANOBOT_PROVIDERS__OPENAI__API_BASE": fake_llm.openai_base_url,
    }  # "OpenAI" is the fake server
    fake_llm.script(Reply.text("hello from gpt"))
    refused = nanobot_run("agent", "-m", "hi", env=env)  # the default model is Anthropic's
    assert refused.returncode == 2 and "no API key for provider 'anthropic'" in refused.stderr
    hint = _joined(refused.stderr)
    assert "You have a key for openai" in hint
    command = re.search(r"run `nanobot agent (--model \S+)`", hint)
    assert command, hint
    answered = nanobot_run("agent", *command.group(1).split(), "-m", "hi", env=env)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "hello from gpt"
    assert fake_llm.requests[0].body["model"] == "gpt-4.1"
    # the demo gives the same advice, not "set OPENAI_API_KEY and run `nanobot agent`" (that fails, as above)
    demo = nanobot_run("demo", "-m", "hello")
    assert demo.returncode == 0, demo.stderr
    advice = _joined(demo.stdout)
    assert f"nanobot agent {command.group(1)}" in advice and "nanobot onboard" in advice


def test_status_says_how_to_fix_a_missing_key_and_that_there_is_no_file_yet(
    nanobot_run, isolated_home
):
    shown = nanobot_run("status")
    assert shown.returncode == 0, shown.stderr
    said = _joined(shown.stdout)
    assert "no API key for provider 'anthropic' Set ANTHROPIC_API_KEY in the environment" in said
    assert "`nanobot demo`" in said
    assert "nothing (there is no config file yet)" in said
    assert "every key in the file is used" not in said


def test_help_tells_a_new_user_where_to_start(nanobot_run):
    shown = nanobot_run("--help")
    assert shown.returncode == 0
    assert (
        "New here? `nanobot demo` tries the chat with no API key; `nanobot onboard` sets you up."
        in _joined(shown.stdout)
    )


def test_onboard_skip_says_how_to_use_another_provider(isolated_home):
    term = Terminal("onboard", columns=250)  # the long test path on one line
    try:
        term.wait_for("API key (not shown):")
        term.child.send("\r")
        term.wait_for("skipped: no key saved")
        assert term.finish() == 0
    finally:
        term.close()
    said = _joined(term.text())
    assert f"Another provider: set agents.defaults.model in {isolated_home / 'config.json'}" in said
    assert "No key at all: `nanobot demo`." in said


def test_chat_help_wraps_between_words_in_an_80_column_terminal(configure):
    configure()
    term = Terminal("agent")  # 80 x 24
    try:
        term.wait_for("you ›")
        term.send("/help")
        term.wait_for("Ctrl-D: leave")
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    lines = term.lines()
    start = next(i for i, line in enumerate(lines) if "/help" in line and "show this help" in line)
    shown = lines[start : start + 12]
    text = " ".join(" ".join(shown).split())
    # no word cut at the edge ("(Ctr" + "l-C stops yours)"), continuations indented under the text
    assert "(Ctrl-C stops yours)" in text and "(twice on an empty prompt: leave)" in text
    stop = next(i for i, line in enumerate(shown) if line.lstrip().startswith("/stop"))
    assert shown[stop + 1].startswith(" " * 13) and shown[stop + 1].strip()


def test_a_wrapped_retry_line_keeps_its_indent_so_it_never_reads_as_the_answer(configure, fake_llm):
    configure()
    fake_llm.script(
        Reply.cut_stream("Half an answer", chunks=["Half ", "an answer"]),
        Reply.text("Whole answer."),
    )
    term = Terminal("agent", env={"NANOBOT_RETRY_BASE_DELAY": "0.01"})  # 80 columns
    try:
        term.wait_for("you ›")
        term.send("hello")
        term.wait_for("Whole answer.")
        term.wait_for_count("you ›", 2)
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    lines = term.lines()
    start = next(i for i, line in enumerate(lines) if "the connection dropped mid-answer" in line)
    end = next(i for i, line in enumerate(lines) if "(attempt 2)" in line)
    assert end > start  # the line is long enough to wrap at 80 columns
    assert all(line.startswith("  ") and line.strip() for line in lines[start : end + 1]), lines[
        start : end + 1
    ]


def test_a_rejected_key_names_where_that_provider_s_key_comes_from(
    nanobot_run, fake_llm, configure
):
    configure("anthropic")
    fake_llm.script(Reply.error(401, message="invalid x-api-key"))
    refused = nanobot_run("agent", "-m", "hi")
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr
    assert "check ANTHROPIC_API_KEY or providers.anthropic.apiKey in the config" in _joined(
        refused.stderr
    )
    assert "<name>" not in refused.stderr


def test_onboard_with_only_an_openai_key_says_so_before_asking_for_anthropic_s(isolated_home):
    term = Terminal("onboard", columns=250, env={"OPENAI_API_KEY": "sk-openai-test-123456"})
    try:
        term.wait_for("API key (not shown):")
        asked = _joined(term.text())
        term.child.send("\r")
        term.wait_for("skipped: no key saved")
        assert term.finish() == 0
    finally:
        term.close()
    assert (
        "You have a key for openai: to use it, set agents.defaults.model (e.g. openai/gpt-4.1)"
        in asked
    )
    assert asked.index("You have a key for openai") < asked.index("Paste your anthropic API key")
