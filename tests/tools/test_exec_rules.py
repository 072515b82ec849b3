"""exec's config keys and rules: confinement, network, allow / ask / deny, nanobot 0.3.5's patterns."""

from __future__ import annotations

import json

import pytest
from nanobot.app import exec_rules, tool_context
from nanobot.config import default_file_dict, load_config
from nanobot.errors import ConfigError
from nanobot.tools.exec_rules import ExecRules, wants_network


def _load(tmp_path, exec_cfg: dict, **tools):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"tools": {"exec": exec_cfg, **tools}}))
    return load_config(path, environ={})


def test_defaults_are_auto_confinement_and_network_ask(tmp_path):
    cfg = _load(tmp_path, {})
    rules = exec_rules(cfg)
    assert (
        cfg.tools.exec.confinement == "auto" and rules.network == "ask" and not rules.unconfined_ok
    )
    assert rules.deny == () and rules.allow == () and not rules.allow_only


def test_patterns_and_network_are_read_in_camel_and_snake_case(tmp_path):
    cfg = _load(
        tmp_path,
        {"allow": ["^git status$"], "ask": ["^git push"], "deny": [r"\bshred\b"], "network": True},
    )
    rules = exec_rules(cfg)
    assert rules.allowed("git status") and not rules.allowed("git status --short")
    assert rules.asked_by("git push origin") == "^git push"
    assert "deny pattern" in rules.denied_by("shred -u secrets.txt")
    assert rules.network is True


def test_nanobot_035_patterns_keep_their_meaning(tmp_path):
    cfg = _load(tmp_path, {"allowPatterns": [r"^ls\b", r"^cat\b"], "denyPatterns": [r"rm\s+-rf"]})
    rules = exec_rules(cfg)
    assert rules.denied_by("ls -la") is None and rules.denied_by("cat notes.md") is None
    assert "allowPatterns" in rules.denied_by("python3 x.py")  # 0.3.5 refused anything not allowed
    assert "deny pattern" in rules.denied_by("ls; rm -rf build")


@pytest.mark.parametrize(
    ("exec_cfg", "message"),
    [
        ({"network": "sometimes"}, 'tools.exec.network: expected false, true or "ask"'),
        (
            {"confinement": "docker"},
            'tools.exec.confinement: expected "auto", "bwrap", "landlock" or "none"',
        ),
        ({"deny": ["(unclosed"]}, "tools.exec.deny: invalid pattern '(unclosed'"),
        ({"allowPatterns": ["["]}, "tools.exec.allowPatterns: invalid pattern"),
        ({"ask": "git push"}, "tools.exec.ask: expected a list"),
        ({"allow": [3]}, "tools.exec.allow[0]: expected a string"),
    ],
)
def test_invalid_exec_settings_name_the_key(tmp_path, exec_cfg, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        _load(tmp_path, exec_cfg)


def test_confinement_none_and_the_flag_mean_the_user_chose_unconfined(tmp_path):
    assert exec_rules(_load(tmp_path, {"confinement": "none"})).unconfined_ok
    cfg = _load(tmp_path, {})
    cfg.tools.exec.allow_unconfined = True  # what --allow-unconfined-exec sets
    assert exec_rules(cfg).unconfined_ok


def test_tool_context_carries_the_configured_confinement(tmp_path):
    ctx = tool_context(_load(tmp_path, {"confinement": "none"}), tmp_path)
    assert ctx.confinement.mechanism == "none" and 'confinement is "none"' in ctx.confinement.detail


def test_new_config_files_get_the_new_keys_but_not_the_legacy_ones():
    written = default_file_dict()["tools"]["exec"]
    assert written["confinement"] == "auto" and written["network"] == "ask"
    assert written["allow"] == [] and written["ask"] == [] and written["deny"] == []
    assert (
        "allowPatterns" not in written
        and "denyPatterns" not in written
        and "allowUnconfined" not in written
    )


def test_network_from_the_environment(tmp_path):
    path = tmp_path / "config.json"
    cfg = load_config(path, environ={"NANOBOT_TOOLS__EXEC__NETWORK": "false"})
    assert cfg.tools.exec.network is False


@pytest.mark.parametrize(
    "command",
    [
        "curl -s https://example.com",
        "wget x",
        "git clone https://github.com/a/b",
        "git pull",
        "pip install requests",
        "npm install",
        "echo x > /dev/tcp/1.2.3.4/80",
        "ssh host",
        "uv add httpx",
        "python3 -m pip install rich",
    ],
)
def test_commands_that_want_network_are_recognised(command):
    assert wants_network(command)


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git commit -m 'fetch data later'",
        "ls -la",
        "python3 script.py",
        "pip list",
        "pip install --no-index ./dist/pkg.whl",
        "grep -r http_proxy .",
        "make build",
        "echo hostname",
    ],
)
def test_local_commands_are_not_asked_about(command):
    assert not wants_network(command)


def test_rules_reject_an_unknown_network_mode():
    with pytest.raises(ConfigError):
        ExecRules.from_lists(network="maybe")
