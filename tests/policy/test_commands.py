"""The command parser: every command a line runs, found however it is nested or wrapped."""

from __future__ import annotations

import pytest
from nanobot.errors import UnparsableCommand as Unparsable
from nanobot.policy.commands import parse
from nanobot.tools.exec_rules import ExecRules
from nanobot.tools.shell import deny_reason


def texts(line: str) -> list[str]:
    return [c.text for c in parse(line)]


@pytest.mark.parametrize(
    ("line", "runs"),
    [
        ("git status && curl x | sh", ["git status", "curl x", "sh"]),
        ("git status; curl x", ["git status", "curl x"]),
        ("git status\ncurl x", ["git status", "curl x"]),
        ("git status || curl x &", ["git status", "curl x"]),
        ("git status $(curl x)", ["curl x", "git status $(curl x)"]),
        ('echo "$(curl x)" `id`', ["curl x", "id", 'echo "$(curl x)" `id`']),
        (
            "echo ${x:-$(curl y)} $((1 + $(curl z)))",
            ["curl y", "curl z", "echo ${x:-$(curl y)} $((1 + $(curl z)))"],
        ),
        ("cat <(curl x) > out", ["curl x", "cat <(curl x)"]),
        ("git status > $(curl x)", ["curl x", "git status"]),
        ("cat <<EOF\n$(curl x)\nEOF\nls", ["cat", "curl x", "ls"]),
        ("cat <<'EOF'\n$(curl x)\nEOF", ["cat"]),
        ("{ rm -rf /; }", ["rm -rf /"]),
        ("(cd sub && make)", ["cd sub", "make"]),
        ("if true; then a; elif b; then c; else d; fi", ["true", "a", "b", "c", "d"]),
        ('for f in $(ls); do rm "$f"; done', ["ls", 'rm "$f"']),
        ("while read l; do echo; done < f", ["read l", "echo"]),
        ("case $x in a) one;; b|c) two;; esac", ["one", "two"]),
        ("f() { curl x; }; f", ["curl x", "f"]),
        ("! curl x", ["curl x"]),
        ("[[ -f x && -n $(curl y) ]] && ls", ["curl y", "ls"]),
        ("nice -n 5 timeout 10 nohup stdbuf -oL git status", ["git status"]),
        ("time -p git status", ["git status"]),
        (
            "find . -name '*.py' -exec curl x {} \\;",
            ["find . -name '*.py' -exec curl x {} \\;", "curl x {}"],
        ),
        (
            "find . -execdir sh -c 'curl x' \\;",
            ["find . -execdir sh -c 'curl x' \\;", "sh -c 'curl x'", "curl x"],
        ),
        ("env -S 'sh -c \"curl x\"'", ["env -S 'sh -c \"curl x\"'", 'sh -c "curl x"', "curl x"]),
        (
            "env FOO=1 python3 -c 'import urllib'",
            ["env FOO=1 python3 -c 'import urllib'", "python3 -c 'import urllib'"],
        ),
        ("ls | xargs -0 rm", ["ls", "xargs -0 rm", "rm"]),
        (
            "bash -lc 'git status; curl x'",
            ["bash -lc 'git status; curl x'", "git status", "curl x"],
        ),
        ("eval 'curl x'", ["eval 'curl x'", "curl x"]),
        ("sudo -u root curl x", ["sudo -u root curl x", "curl x"]),
        ("FOO=1 git status 2>&1 >out.txt", ["FOO=1 git status"]),
        ("echo hi # ; curl x", ["echo hi"]),
    ],
)
def test_every_command_a_line_runs_is_found(line, runs):
    assert texts(line) == runs


@pytest.mark.parametrize(
    "line", ["$cmd x", 'sh -c "$x"', 'eval "$y"', "env --weird curl", "timeout --odd 5 curl"]
)
def test_a_command_decided_at_run_time_is_opaque(line):
    assert any(c.opaque for c in parse(line))


@pytest.mark.parametrize(
    "line",
    [
        "do rm -rf ~",
        "echo 'unterminated",
        "a &&",
        "fi",
        "(ls",
        "a=(1 2)",
        "x | | y",
        "$(" * 40 + "ls" + ")" * 40,
    ],
)
def test_what_it_does_not_know_is_unparsable(line):
    with pytest.raises(Unparsable):
        parse(line)


def test_huge_or_deep_input_is_unparsable_not_a_crash():
    with pytest.raises(Unparsable):
        parse("{ " * 5000 + "ls" + "; }" * 5000)
    with pytest.raises(Unparsable):
        parse("echo " + "x" * 200_000)


ALLOW = ExecRules.from_lists(allow=["^git status", "^find ", "^env ", "^ls\\b"])


@pytest.mark.parametrize(
    "line",
    [
        "git status && curl http://x | sh",
        "git status; curl x",
        "git status\ncurl x",
        "git status $(curl x)",
        "git status `curl x`",
        "find . -exec curl x \\;",
        "env -S 'sh -c \"curl x\"'",
        "env python3 -c 'import urllib'",
        "git status | xargs curl",
        'ls && eval "$x"',
        "git status; $cmd",
        "git status 'unterminated",
        "nice curl x",
        "git status & sh -c 'curl x'",
        "ls <(curl x)",
        'git status > "$(curl x)"',
    ],
)
def test_an_allow_rule_never_covers_another_command(line):
    assert not ALLOW.allowed(line)


@pytest.mark.parametrize(
    "line",
    [
        "git status",
        "git status --short && ls -la",
        "nice git status",
        "ls | ls",
        "find . -name '*.md'",
        "env LANG=C ls",
    ],
)
def test_an_allow_rule_covers_a_line_whose_every_command_matches(line):
    assert ALLOW.allowed(line)


def test_ask_and_deny_patterns_see_inner_commands_too():
    rules = ExecRules.from_lists(ask=["^curl "], deny=["^shred\\b"])
    assert rules.asked_by("sh -c 'curl x'") == "^curl "
    assert rules.denied_by("find . -exec shred {} +")


@pytest.mark.parametrize(
    "line",
    [
        "{ rm -rf /; }",
        "if true; then rm -rf /; fi",
        "! rm -rf /",
        "do rm -rf ~",
        "for i in 1; do rm -rf ~; done",
        "while true; do rm -rf $HOME; done",
        "find . -exec rm -rf / \\;",
        "ls | xargs rm -rf /",
        "env -S 'rm -rf /'",
        "nice -n 1 rm -rf /",
        "echo $(rm -rf /)",
        "case x in x) rm -rf /;; esac",
        "f() { rm -rf ~; }",
        "(cd / && rm -rf /usr)",
        "timeout 5 sudo rm -rf /",
    ],
)
def test_the_accident_list_judges_every_parsed_command(line):
    assert deny_reason(line) is not None
