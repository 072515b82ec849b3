from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from nanobot.errors import ToolError
from nanobot.secrets_mask import is_secret_name
from nanobot.tools.registry import ToolRegistry
from nanobot.tools.shell import OUTPUT_CAP, ExecTool, child_env, deny_reason

import host_procs
from host_procs import alive


def make_exec(ctx, grace: float = 0.3) -> ExecTool:
    tool = ExecTool(ctx)
    tool.kill_grace = grace
    return tool


def run(tool, **kwargs):
    return asyncio.run(tool.run(**kwargs))


def host_pids(marker: str) -> list[int]:
    return host_procs.host_pids(marker, command="sleep")


def wait_gone(marker: str, within: float = 2.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not host_pids(marker):
            return True
        time.sleep(0.02)
    return False


def wait_dead(pid: int, within: float = 2.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_output_has_stdout_labelled_stderr_and_exit_code(make_ctx):
    out = run(make_exec(make_ctx()), command="echo out; echo err >&2; exit 3")
    assert out == "out\n[stderr]\nerr\n[exit code: 3]"


def test_no_output(make_ctx):
    assert run(make_exec(make_ctx()), command="true") == "(no output)\n[exit code: 0]"


def test_killed_by_signal_is_named(make_ctx):
    assert run(make_exec(make_ctx()), command="kill -9 $$").endswith(
        "[exit code: -9 (killed by SIGKILL)]"
    )


def test_runs_in_workspace_with_stdin_closed(make_ctx, ws):
    out = run(make_exec(make_ctx()), command="pwd; cat; echo after-cat")
    assert out == f"{ws.resolve()}\nafter-cat\n[exit code: 0]"


def test_disabled(make_ctx, ws):
    with pytest.raises(ToolError, match="disabled"):
        run(make_exec(make_ctx(exec_enabled=False)), command="touch ran")
    assert not (ws / "ran").exists()


def test_working_dir_inside_workspace(make_ctx, ws):
    (ws / "sub").mkdir()
    out = run(make_exec(make_ctx(restrict_to_workspace=True)), command="pwd", working_dir="sub")
    assert out.startswith(str((ws / "sub").resolve()))


@pytest.mark.parametrize("where", ["dotdot", "absolute", "tilde", "symlink"])
def test_working_dir_outside_refused_when_restricted_and_when_hidden(make_ctx, ws, tmp_path, where):
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "link").symlink_to(outside)
    raw = {"dotdot": "../outside", "absolute": str(outside), "tilde": "~", "symlink": "link"}[where]
    with pytest.raises(ToolError, match="outside the workspace"):
        run(make_exec(make_ctx(restrict_to_workspace=True)), command="touch ran", working_dir=raw)
    # not restricted: still refused, because /tmp and HOME are invisible to commands
    with pytest.raises(ToolError, match="cannot see"):
        run(make_exec(make_ctx()), command="touch ran", working_dir=raw)
    assert not (outside / "ran").exists() and not (tmp_path / "home" / "ran").exists()


def test_working_dir_outside_visible_folder_is_read_only(make_ctx, tmp_path, approver):
    asked = approver("y")
    out = run(
        make_exec(make_ctx(approver=asked)),
        command="pwd; touch nanobot-exec-probe; echo rc=$?",
        working_dir="/usr",
    )
    assert out.startswith("/usr\n") and "rc=0" not in out
    assert not Path("/usr/nanobot-exec-probe").exists()
    assert [r.kind for r in asked.requests] == ["file-outside"]


@pytest.mark.parametrize("where", ["/", "/etc", "/usr/share"])
def test_working_dir_outside_the_workspace_needs_approval(make_ctx, ws, approver, where):
    """Issue 32, attack 9: `working_dir: "/"` was accepted without a question."""
    asked = approver("n")
    with pytest.raises(ToolError, match="outside the workspace"):
        run(
            make_exec(make_ctx(approver=asked)),
            command="pwd > $OLDPWD/ran; touch ran",
            working_dir=where,
        )
    assert [r.kind for r in asked.requests] == ["file-outside"]
    assert not list(ws.parent.glob("ran")) and not (ws / "ran").exists()
    with pytest.raises(ToolError, match="was refused"):  # one-shot: nobody to ask
        run(make_exec(make_ctx()), command="true", working_dir=where)


def test_missing_working_dir(make_ctx):
    with pytest.raises(ToolError, match="not an existing directory"):
        run(make_exec(make_ctx()), command="true", working_dir="nope")


def test_timeout_kills_grandchildren(make_ctx, ws):
    tool = make_exec(make_ctx(exec_timeout=0.5))
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        run(tool, command="sh -c 'sleep 3001 & echo $! > pidfile; wait'; echo never")
    assert time.monotonic() - started < 5
    assert "did not finish within 0.5s" in str(info.value)
    assert (ws / "pidfile").read_text().strip() and wait_gone("3001")


def test_per_call_timeout_only_lowers_the_limit(make_ctx):
    tool = make_exec(make_ctx(exec_timeout=0.5))
    started = time.monotonic()
    with pytest.raises(ToolError, match="within 0.5s"):
        run(tool, command="sleep 30", timeout=100)
    assert time.monotonic() - started < 5
    tool = make_exec(make_ctx(exec_timeout=60))
    with pytest.raises(ToolError, match="within 0.3s"):
        run(tool, command="sleep 30", timeout=0.3)


def test_timeout_keeps_partial_output(make_ctx):
    with pytest.raises(ToolError) as info:
        run(make_exec(make_ctx(exec_timeout=0.5)), command="echo progress; sleep 30")
    assert str(info.value).endswith("\nprogress")


def test_term_ignoring_process_is_killed_after_grace(make_ctx, ws):
    tool = make_exec(make_ctx(exec_timeout=0.5), grace=0.3)
    with pytest.raises(ToolError):
        run(tool, command="trap '' TERM; sleep 3002 & echo $! > pidfile; wait")
    assert (ws / "pidfile").read_text().strip() and wait_gone("3002")


def test_background_process_holding_output_ends_with_the_command(make_ctx, ws):
    # confined: the command's shell exiting ends its sandbox, background included
    started = time.monotonic()
    out = run(
        make_exec(make_ctx(exec_timeout=10)), command="sleep 3003 & echo $! > pidfile; echo started"
    )
    assert out == "started\n[exit code: 0]" and time.monotonic() - started < 5
    assert (ws / "pidfile").read_text().strip() and wait_gone("3003", within=0.5)


def test_background_process_with_redirected_output_returns_at_once(make_ctx, ws):
    started = time.monotonic()
    out = run(make_exec(make_ctx(exec_timeout=5)), command="sleep 2 >/dev/null 2>&1 & echo bg")
    assert out == "bg\n[exit code: 0]" and time.monotonic() - started < 1.5


def test_cancel_kills_the_group_and_propagates(make_ctx, ws):
    tool = make_exec(make_ctx(exec_timeout=60))
    pidfile = ws / "pidfile"

    async def main():
        task = asyncio.create_task(tool.run(command="sleep 3004 & echo $! > pidfile; wait"))
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await task

    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert time.monotonic() - started < 5
    assert wait_gone("3004")


def test_secrets_are_not_in_child_env(make_ctx, monkeypatch):
    monkeypatch.setenv("FOO_API_KEY", "sk-foo")
    monkeypatch.setenv("MY_SERVICE_LOGIN", "configured-secret")
    monkeypatch.setenv("GH_TOKEN", "ghp_x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws")
    monkeypatch.setenv("DB_PASSWORD_FILE", "pw")
    monkeypatch.setenv("HARMLESS_SETTING", "kept")
    ctx = make_ctx(secret_env_names=frozenset({"MY_SERVICE_LOGIN"}))
    out = run(make_exec(ctx), command="env")
    for leaked in ("sk-foo", "configured-secret", "ghp_x", "AWS_SECRET", "DB_PASSWORD"):
        assert leaked not in out
    assert "HARMLESS_SETTING=kept" in out and "PATH=" in out


def test_each_command_gets_the_environment_as_it_is_now(make_ctx, monkeypatch):
    # secret names are judged once per name (a cache): values and new names still come from now
    tool = make_exec(make_ctx())
    monkeypatch.setenv("HARMLESS_SETTING", "first")
    monkeypatch.setenv("GONE_LATER", "here")
    first = run(tool, command="env")
    assert "HARMLESS_SETTING=first" in first and "GONE_LATER=here" in first
    monkeypatch.setenv("HARMLESS_SETTING", "second")
    monkeypatch.delenv("GONE_LATER")
    monkeypatch.setenv("LATE_API_KEY", "sk-late")
    monkeypatch.setenv("LATE_SETTING", "new")
    second = run(tool, command="env")
    assert "HARMLESS_SETTING=second" in second and "LATE_SETTING=new" in second
    assert "GONE_LATER" not in second and "sk-late" not in second


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("FOO_APIKEY", True),
        ("GITHUB_TOKEN", True),
        ("SLACK_BOT_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("CLIENT_SECRET", True),
        ("PGPASSWORD", True),
        ("db_password", True),
        ("STRIPE_KEY", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("PATH", False),
        ("HOME", False),
        ("SSH_AUTH_SOCK", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("KEYBOARD_LAYOUT", False),
        ("MONKEY", False),
        ("LANG", False),
        ("HF_TOKEN", True),
        ("GITLAB_PAT", True),
        ("NPM_AUTH", True),
        ("AUTHOR", False),
        ("DB_PASSWORD_FILE", True),
    ],
)
def test_secret_name_rule(name, secret):
    assert is_secret_name(name) is secret


def test_child_env_drops_configured_names_case_insensitively():
    assert child_env({"Custom": "1", "KEEP": "2"}, ["CUSTOM"]) == {"KEEP": "2"}


def test_long_output_keeps_head_and_tail(make_ctx):
    out = run(make_exec(make_ctx()), command="seq 1 20000")
    full = "".join(f"{i}\n" for i in range(1, 20001))
    assert out.startswith("1\n2\n3\n")
    assert out.endswith("19999\n20000\n[exit code: 0]")
    omitted = len(full) - OUTPUT_CAP
    assert f"[... {omitted:,} characters omitted ...]" in out
    assert len(out) < OUTPUT_CAP + 200


def test_huge_output_is_bounded_and_counted(make_ctx):
    out = run(make_exec(make_ctx()), command="yes | head -c 3000000; echo; echo END")
    assert out.endswith("END\n[exit code: 0]")
    assert f"[... about {3_000_005 - OUTPUT_CAP:,} characters omitted ...]" in out
    assert len(out) < OUTPUT_CAP + 200


def test_stdout_and_stderr_share_the_cap(make_ctx):
    out = run(make_exec(make_ctx()), command="seq 1 50000; echo only-error >&2")
    assert out.endswith("[stderr]\nonly-error\n[exit code: 0]")
    assert len(out) < OUTPUT_CAP + 200


REFUSED = [
    "rm -rf /",
    "rm -fr /",
    "rm -r -f /",
    "rm -Rf /*",
    "rm -rf ~",
    "rm -rf ~/",
    "rm -rf $HOME",
    "rm --recursive --force /",
    "rm -rf --no-preserve-root /",
    "sudo rm -rf /",
    "sudo -u root rm -rf /",
    "cd /tmp && rm -rf /",
    "echo hi; rm -rf / ",
    "FOO=1 rm -rf /usr",
    "bash -c 'rm -rf /'",
    "rm -rf //",
    ":(){ :|:& };:",
    "bomb(){ bomb|bomb& }; bomb",
    "mkfs.ext4 /dev/sda1",
    "mkfs -t ext4 /dev/sdb",
    "sudo mkfs /dev/nvme0n1",
    "dd if=/dev/zero of=/dev/sda bs=1M",
    "dd if=img of=/dev/nvme0n1",
    "echo x > /dev/sda",
    "cat img >/dev/sdb",
    "shutdown -h now",
    "reboot",
    "sudo halt",
    "poweroff",
    "systemctl reboot",
    "chmod -R 777 /",
    "chown -R me /",
]


@pytest.mark.parametrize("command", REFUSED)
def test_destructive_command_refused_before_running(make_ctx, ws, command):
    registry = ToolRegistry([make_exec(make_ctx())])
    result = asyncio.run(registry.execute("exec", {"command": f"touch ran; {command}"}))
    assert result.is_error
    assert "refused by the safety policy" in result.content and "it was not run" in result.content
    assert not (ws / "ran").exists()


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf ./build",
        "rm -rf /tmp/scratch",
        "rm -f /",
        "ls -la /",
        "grep -r root .",
        "echo hi > /dev/null",
        "dd if=/dev/zero of=./disk.img count=1",
        "chmod -R 755 ./bin",
        "echo shutdown",
        "cat /etc/hostname",
    ],
)
def test_ordinary_commands_allowed(command):
    assert deny_reason(command) is None


def test_hint_shows_the_command(make_ctx):
    assert make_exec(make_ctx()).hint({"command": "ls -la"}) == 'exec("ls -la")'


def test_process_that_left_the_group_cannot_hang_exec_and_is_killed(make_ctx, ws):
    started = time.monotonic()
    out = run(make_exec(make_ctx(exec_timeout=10)), command="setsid sleep 3005 & echo $! > pidfile")
    assert out.endswith("[exit code: 0]") and time.monotonic() - started < 5
    # setsid leaves the process group, not the sandbox: it is gone too
    assert (ws / "pidfile").read_text().strip() and wait_gone("3005")


@pytest.mark.parametrize("ticks", [1, 2, 3, 5])
def test_cancel_while_starting_still_kills_the_group(make_ctx, ws, ticks):
    tool = make_exec(make_ctx(exec_timeout=60))

    async def main():
        task = asyncio.create_task(tool.run(command="sleep 3006 & echo $! > pidfile; wait"))
        for _ in range(ticks):
            await asyncio.sleep(0)
        task.cancel()
        await task

    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert time.monotonic() - started < 5
    assert wait_gone("3006")
