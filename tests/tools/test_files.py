from __future__ import annotations

import asyncio
import os
import stat

import pytest
from nanobot.errors import ToolError
from nanobot.tools.files import (
    READ_CHAR_CAP,
    EditFileTool,
    ListDirTool,
    ReadFileTool,
    WriteFileTool,
)
from nanobot.tools.registry import ToolRegistry


def run(tool, **kwargs):
    return asyncio.run(tool.run(**kwargs))


# --- read_file ---------------------------------------------------------------------


def test_read_whole_small_file(make_ctx, ws):
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    assert run(ReadFileTool(make_ctx()), path="a.txt") == "one\ntwo\nthree\n"


def test_read_offset_and_limit_slice_lines(make_ctx, ws):
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = run(ReadFileTool(make_ctx()), path="a.txt", offset=3, limit=2)
    assert (
        out == "line 3\nline 4\n[showing lines 3-4 of 10; call read_file with offset=5 to continue]"
    )
    assert run(ReadFileTool(make_ctx()), path="a.txt", offset=9) == "line 9\nline 10\n"


def test_read_truncates_at_char_cap_and_continues_from_offset(make_ctx, ws):
    lines = [f"{i:05d} " + "x" * 93 + "\n" for i in range(1, 5001)]  # 100 chars a line
    (ws / "big.txt").write_text("".join(lines))
    tool = ReadFileTool(make_ctx())
    first = run(tool, path="big.txt")
    per_call = READ_CHAR_CAP // 100
    assert first.endswith(
        f"[truncated: showing lines 1-{per_call} of 5000; call read_file with offset={per_call + 1} to continue]"
    )
    assert len(first) < READ_CHAR_CAP + 200
    second = run(tool, path="big.txt", offset=per_call + 1)
    assert second.startswith(lines[per_call])
    # Following the hints reassembles the file exactly.
    text, offset = "", 1
    while True:
        out = run(tool, path="big.txt", offset=offset)
        body, _, note = out.partition("[truncated")
        text += body
        if not note:
            break
        offset = int(note.split("offset=")[1].split()[0])
    assert text == "".join(lines)


def test_read_single_huge_line_shows_its_head(make_ctx, ws):
    (ws / "min.js").write_text("a" * (READ_CHAR_CAP + 10) + "\nnext\n")
    out = run(ReadFileTool(make_ctx()), path="min.js")
    assert out.startswith("a" * READ_CHAR_CAP + "\n[truncated: line 1 of 2")
    assert "offset=2" in out


def test_read_keeps_file_without_trailing_newline(make_ctx, ws):
    (ws / "a.txt").write_text("x\ny")
    assert run(ReadFileTool(make_ctx()), path="a.txt") == "x\ny"
    assert run(ReadFileTool(make_ctx()), path="a.txt", offset=2) == "y"


def test_read_refuses_binary(make_ctx, ws):
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ToolError, match="binary"):
        run(ReadFileTool(make_ctx()), path="img.png")


def test_read_refuses_undecodable(make_ctx, ws):
    (ws / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(ToolError, match="not UTF-8"):
        run(ReadFileTool(make_ctx()), path="latin1.txt")


def test_read_missing_file_and_directory(make_ctx, ws):
    with pytest.raises(ToolError, match="file not found: nope.txt"):
        run(ReadFileTool(make_ctx()), path="nope.txt")
    with pytest.raises(ToolError, match="is a directory"):
        run(ReadFileTool(make_ctx()), path=".")


def test_read_offset_past_end(make_ctx, ws):
    (ws / "a.txt").write_text("1\n2\n")
    with pytest.raises(ToolError, match="offset 5 is past the end of a.txt, which has 2 lines"):
        run(ReadFileTool(make_ctx()), path="a.txt", offset=5)


def test_read_empty_file(make_ctx, ws):
    (ws / "e.txt").write_text("")
    assert run(ReadFileTool(make_ctx()), path="e.txt") == "(e.txt is empty)"


def test_read_outside_workspace_refused_through_registry(make_ctx, tmp_path):
    (tmp_path / "secret.txt").write_text("s")
    registry = ToolRegistry([ReadFileTool(make_ctx(restrict_to_workspace=True))])
    result = asyncio.run(registry.execute("read_file", {"path": "../secret.txt"}))
    assert result.is_error and "outside the workspace" in result.content


# --- write_file --------------------------------------------------------------------


def test_write_creates_parents_and_reports_bytes(make_ctx, ws):
    out = run(WriteFileTool(make_ctx()), path="deep/er/new.md", content="héllo\n")
    assert (ws / "deep/er/new.md").read_text() == "héllo\n"
    assert out == "Created deep/er/new.md (7 bytes written)"


def test_write_overwrites_and_keeps_mode(make_ctx, ws):
    script = ws / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    out = run(WriteFileTool(make_ctx()), path="run.sh", content="#!/bin/sh\n")
    assert out.startswith("Overwrote run.sh")
    assert script.read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_write_outside_workspace_is_refused_restricted_asked_otherwise(
    make_ctx, tmp_path, approver
):
    target = tmp_path / "x.txt"
    with pytest.raises(ToolError, match="outside the workspace"):
        run(WriteFileTool(make_ctx(restrict_to_workspace=True)), path=str(target), content="x")
    with pytest.raises(ToolError, match="outside the workspace"):  # nobody to ask: refused
        run(WriteFileTool(make_ctx()), path=str(target), content="x")
    assert not target.exists()
    asked = approver("no, keep it in the workspace")
    with pytest.raises(ToolError, match="keep it in the workspace"):
        run(WriteFileTool(make_ctx(approver=asked)), path=str(target), content="x")
    assert not target.exists()
    yes = approver("y")
    run(WriteFileTool(make_ctx(approver=yes)), path=str(target), content="x")
    assert target.read_text() == "x"
    assert [r.kind for r in asked.requests + yes.requests] == ["file-outside", "file-outside"]
    assert "+x" in yes.requests[0].detail  # the user saw the change as a diff


def test_write_to_directory_refused(make_ctx, ws):
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        run(WriteFileTool(make_ctx()), path="d", content="x")


def test_write_through_tilde_lands_in_home_once_approved(make_ctx, approver):
    run(WriteFileTool(make_ctx(approver=approver("y"))), path="~/note.txt", content="hi")
    assert open(os.path.join(os.environ["HOME"], "note.txt")).read() == "hi"


# --- edit_file ---------------------------------------------------------------------


def test_edit_replaces_unique_match(make_ctx, ws):
    (ws / "c.py").write_text("a = 1\nb = 2\n")
    out = run(EditFileTool(make_ctx()), path="c.py", old_text="b = 2", new_text="b = 3")
    assert (ws / "c.py").read_text() == "a = 1\nb = 3\n"
    assert out == "Edited c.py: replaced 1 occurrence"


def test_edit_multiple_matches_refused_with_count(make_ctx, ws):
    (ws / "c.py").write_text("x = 0\ny = 1\nx = 0\n")
    with pytest.raises(ToolError) as info:
        run(EditFileTool(make_ctx()), path="c.py", old_text="x = 0", new_text="x = 9")
    assert "occurs 2 times" in str(info.value) and "lines 1, 3" in str(info.value)
    assert "replace_all" in str(info.value)
    assert (ws / "c.py").read_text() == "x = 0\ny = 1\nx = 0\n"


def test_edit_replace_all(make_ctx, ws):
    (ws / "c.py").write_text("x = 0\ny = 1\nx = 0\n")
    out = run(
        EditFileTool(make_ctx()), path="c.py", old_text="x = 0", new_text="x = 9", replace_all=True
    )
    assert (ws / "c.py").read_text() == "x = 9\ny = 1\nx = 9\n"
    assert out == "Edited c.py: replaced 2 occurrences"


def test_edit_miss_shows_closest_region(make_ctx, ws):
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(50))
    (ws / "m.py").write_text(body)
    with pytest.raises(ToolError) as info:
        run(
            EditFileTool(make_ctx()),
            path="m.py",
            old_text="def f17(x):\n  return x + 17",
            new_text="",
        )
    message = str(info.value)
    assert message.startswith("old_text was not found in m.py.")
    assert "closest match is lines 52-53" in message
    assert "    52| def f17(x):" in message and "    53|     return x + 17" in message
    assert "-  return x + 17" in message and "+    return x + 17" in message
    assert (ws / "m.py").read_text() == body


def test_edit_miss_with_nothing_similar(make_ctx, ws):
    (ws / "m.txt").write_text("aaaa\nbbbb\n")
    with pytest.raises(ToolError, match="Nothing in the file resembles it"):
        run(EditFileTool(make_ctx()), path="m.txt", old_text="zzzzzzzzzzzz", new_text="")


def test_edit_matches_lf_text_in_crlf_file(make_ctx, ws):
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    run(EditFileTool(make_ctx()), path="w.txt", old_text="one\ntwo", new_text="uno\ndos")
    assert (ws / "w.txt").read_bytes() == b"uno\r\ndos\r\nthree\r\n"


def test_edit_empty_old_text_refused(make_ctx, ws):
    (ws / "a.txt").write_text("x")
    with pytest.raises(ToolError, match="old_text is empty"):
        run(EditFileTool(make_ctx()), path="a.txt", old_text="", new_text="y")


def test_edit_missing_file(make_ctx):
    with pytest.raises(ToolError, match="file not found"):
        run(EditFileTool(make_ctx()), path="ghost.txt", old_text="a", new_text="b")


# --- list_dir ----------------------------------------------------------------------


def _tree(ws):
    (ws / "b.txt").write_text("")
    (ws / "a_dir").mkdir()
    (ws / "a_dir" / "inner.txt").write_text("")
    (ws / "a_dir" / "sub").mkdir()
    (ws / "a_dir" / "sub" / "deep.txt").write_text("")
    for skipped in (".git", "__pycache__", "node_modules"):
        (ws / skipped).mkdir()
        (ws / skipped / "junk").write_text("")


def test_list_dir_flat_sorted_with_dir_marks(make_ctx, ws):
    _tree(ws)
    out = run(ListDirTool(make_ctx()))
    assert out.splitlines() == [".git/", "__pycache__/", "a_dir/", "b.txt", "node_modules/"]


def test_list_dir_recursive_skips_noise(make_ctx, ws):
    _tree(ws)
    out = run(ListDirTool(make_ctx()), path=".", recursive=True)
    assert out.splitlines() == [
        "a_dir/",
        "a_dir/inner.txt",
        "a_dir/sub/",
        "a_dir/sub/deep.txt",
        "b.txt",
    ]


def test_list_dir_caps_entries(make_ctx, ws):
    for i in range(30):
        (ws / f"f{i:02d}").write_text("")
    out = run(ListDirTool(make_ctx()), max_entries=10).splitlines()
    assert out[:10] == [f"f{i:02d}" for i in range(10)]
    assert out[10].startswith("... 20 more")
    assert len(out) == 11


def test_list_dir_recursive_does_not_follow_symlinked_dirs(make_ctx, ws):
    (ws / "d").mkdir()
    (ws / "d" / "loop").symlink_to(ws)
    assert run(ListDirTool(make_ctx()), recursive=True).splitlines() == ["d/", "d/loop/"]


def test_list_dir_errors(make_ctx, ws, tmp_path, approver):
    (ws / "f.txt").write_text("")
    with pytest.raises(ToolError, match="is a file"):
        run(ListDirTool(make_ctx()), path="f.txt")
    with pytest.raises(ToolError, match="directory not found"):
        run(ListDirTool(make_ctx()), path="nope")
    with pytest.raises(ToolError, match="outside the workspace"):
        run(ListDirTool(make_ctx(restrict_to_workspace=True)), path="..")
    with pytest.raises(ToolError, match="outside the workspace"):
        run(ListDirTool(make_ctx()), path="..")  # not restricted, but nobody approved it
    assert run(ListDirTool(make_ctx(approver=approver("y"))), path="..")  # allowed once approved


def test_list_empty_dir(make_ctx, ws):
    assert run(ListDirTool(make_ctx())) == "(. is empty)"


def test_list_dir_stops_counting_past_a_limit(make_ctx, ws, monkeypatch):
    import nanobot.tools.files as files

    monkeypatch.setattr(files, "MAX_COUNTED_EXTRA", 5)
    for i in range(20):
        (ws / f"f{i:02d}").write_text("")
    out = run(ListDirTool(make_ctx()), max_entries=2).splitlines()
    assert out == ["f00", "f01", "... 5+ more (raise max_entries or list a subdirectory)"]


# --- hostile paths: devices, FIFOs, links ------------------------------------------


def test_dev_zero_is_refused_without_reading(make_ctx, approver):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yes = approver("y")
    with pytest.raises(ToolError, match="character device"):
        run(ReadFileTool(make_ctx(approver=yes)), path="/dev/zero")
    assert (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024
    )  # KiB: nothing was loaded
    with pytest.raises(ToolError, match="outside the workspace"):
        run(ReadFileTool(make_ctx(restrict_to_workspace=True)), path="/dev/zero")


def test_a_fifo_in_the_workspace_does_not_hang_read_or_write(make_ctx, ws):
    fifo = ws / "pipe"
    os.mkfifo(fifo)

    async def both():
        with pytest.raises(ToolError, match="FIFO"):
            await asyncio.wait_for(ReadFileTool(make_ctx()).run(path="pipe"), 5)
        with pytest.raises(ToolError, match="FIFO"):
            await asyncio.wait_for(WriteFileTool(make_ctx()).run(path="pipe", content="x"), 5)
        with pytest.raises(ToolError, match="FIFO"):
            await asyncio.wait_for(
                EditFileTool(make_ctx()).run(path="pipe", old_text="a", new_text="b"), 5
            )

    asyncio.run(both())
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_is_refused(make_ctx, ws):
    import socket

    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(ws / "s.sock"))
        with pytest.raises(ToolError, match="socket"):
            run(ReadFileTool(make_ctx()), path="s.sock")
    finally:
        sock.close()


def test_symlink_out_of_the_workspace_is_refused_restricted_and_asked_otherwise(
    make_ctx, ws, tmp_path, approver
):
    canary = tmp_path / "canary.txt"
    canary.write_text("CANARY-SECRET")
    (ws / "link.txt").symlink_to(canary)
    with pytest.raises(ToolError, match="outside the workspace"):
        run(ReadFileTool(make_ctx(restrict_to_workspace=True)), path="link.txt")
    asked = approver("n")
    with pytest.raises(ToolError, match="outside the workspace"):
        run(ReadFileTool(make_ctx(approver=asked)), path="link.txt")
    assert str(canary) in asked.requests[0].summary  # the user is asked about the real target
    with pytest.raises(ToolError, match="outside the workspace"):
        run(WriteFileTool(make_ctx(restrict_to_workspace=True)), path="link.txt", content="owned")
    assert canary.read_text() == "CANARY-SECRET"


def test_hard_link_to_an_outside_file_is_refused_restricted_and_asked_otherwise(
    make_ctx, ws, tmp_path, approver
):
    canary = tmp_path / "canary.txt"
    canary.write_text("CANARY-SECRET")
    os.link(canary, ws / "hl.txt")
    with pytest.raises(ToolError, match="hard links"):
        run(ReadFileTool(make_ctx(restrict_to_workspace=True)), path="hl.txt")
    with pytest.raises(ToolError, match="hard links"):
        run(
            EditFileTool(make_ctx(restrict_to_workspace=True)),
            path="hl.txt",
            old_text="CANARY",
            new_text="x",
        )
    asked = approver("n")
    with pytest.raises(ToolError, match="hard links"):
        run(ReadFileTool(make_ctx(approver=asked)), path="hl.txt")
    assert asked.requests[0].kind == "file-outside"
    assert canary.read_text() == "CANARY-SECRET"


def test_a_symlink_swapped_in_after_the_check_is_not_followed(make_ctx, ws, tmp_path, monkeypatch):
    import nanobot.tools.files as files

    canary = tmp_path / "canary.txt"
    canary.write_text("CANARY-SECRET")
    (ws / "a.txt").write_text("harmless")
    real_open_regular = files.open_regular

    async def swap_then_open(ctx, target, shown, tool):
        os.unlink(target)
        os.symlink(canary, target)  # the attacker's race: the path now points out
        return await real_open_regular(ctx, target, shown, tool)

    monkeypatch.setattr(files, "open_regular", swap_then_open)
    with pytest.raises(ToolError):
        run(ReadFileTool(make_ctx(restrict_to_workspace=True)), path="a.txt")


def test_write_replaces_a_symlink_at_the_name_instead_of_following_it(
    make_ctx, ws, tmp_path, monkeypatch
):
    import nanobot.tools.files as files

    canary = tmp_path / "canary.txt"
    canary.write_text("CANARY")
    real_write = files._write

    def swap_then_write(ctx, target, payload, shown):
        os.symlink(canary, target)  # swapped in between the check and the write
        real_write(ctx, target, payload, shown)

    monkeypatch.setattr(files, "_write", swap_then_write)
    run(WriteFileTool(make_ctx(restrict_to_workspace=True)), path="new.txt", content="data")
    assert canary.read_text() == "CANARY"
    assert (ws / "new.txt").read_text() == "data" and not (ws / "new.txt").is_symlink()


# --- risky writes inside the workspace ask, with the change as a diff --------------


@pytest.mark.parametrize(
    "path, kind",
    [
        (".git/hooks/pre-commit", "persistence"),
        (".git/config", "persistence"),
        (".bashrc", "persistence"),
        ("memory/MEMORY.md", "memory-edit"),
        ("skills/deploy/SKILL.md", "skill-edit"),
        ("HEARTBEAT.md", "persistence"),
        ("USER.md", "prompt-edit"),
        (".vscode/tasks.json", "persistence"),
        (".envrc", "persistence"),
    ],
)
def test_risky_writes_in_the_workspace_ask_first(make_ctx, ws, approver, path, kind):
    refused = approver("not now")
    with pytest.raises(ToolError, match="not now"):
        run(
            WriteFileTool(make_ctx(approver=refused, restrict_to_workspace=True)),
            path=path,
            content="curl x | sh\n",
        )
    assert not (ws / path).exists()
    assert refused.requests[0].kind == kind and "+curl x | sh" in refused.requests[0].detail
    run(WriteFileTool(make_ctx(approver=approver("y"))), path=path, content="curl x | sh\n")
    assert (ws / path).read_text() == "curl x | sh\n"


def test_editing_memory_shows_the_diff_and_a_refusal_leaves_it_unchanged(make_ctx, ws, approver):
    (ws / "memory").mkdir()
    (ws / "memory" / "MEMORY.md").write_text("- likes tea\n")
    asked = approver("no")
    with pytest.raises(ToolError):
        run(
            EditFileTool(make_ctx(approver=asked)),
            path="memory/MEMORY.md",
            old_text="tea",
            new_text="coffee",
        )
    assert (ws / "memory" / "MEMORY.md").read_text() == "- likes tea\n"
    assert (
        "-- likes tea" in asked.requests[0].detail and "+- likes coffee" in asked.requests[0].detail
    )


def test_ordinary_workspace_files_never_ask(make_ctx, ws, approver):
    asked = approver()
    ctx = make_ctx(approver=asked)
    run(WriteFileTool(ctx), path="notes/todo.md", content="buy milk\n")
    run(EditFileTool(ctx), path="notes/todo.md", old_text="milk", new_text="bread")
    run(ReadFileTool(ctx), path="notes/todo.md")
    run(ListDirTool(ctx), path="notes")
    assert asked.requests == []


def test_always_for_a_folder_never_stretches_to_a_secret_file_in_it(make_ctx, tmp_path):
    from nanobot.approvals import SessionApprover
    from nanobot.tools.approval import Decision

    home = tmp_path / "home"
    (home / "notes.txt").write_text("n")
    (home / ".bash_history").write_text("export TOKEN=abc")
    (home / ".env").write_text("KEY=1")
    asked = []

    class Always:
        async def approve(self, request):
            asked.append(request)
            return Decision(True, always=True)

    ctx = make_ctx(approver=SessionApprover(Always()))
    for name in ("notes.txt", "notes.txt", ".bash_history", ".env", ".env"):
        run(ReadFileTool(ctx), path=str(home / name))
    assert [r.summary.split(" (")[0].rsplit("/", 1)[1] for r in asked] == [
        "notes.txt",
        ".bash_history",
        ".env",
    ]


@pytest.mark.parametrize("recursive", [False, True])
def test_list_dir_lists_the_folder_that_was_approved_not_a_link_swapped_in(
    make_ctx, tmp_path, approver, recursive
):
    shared = tmp_path / "shared"
    (shared / "public").mkdir(parents=True)
    (shared / "public" / "notes.txt").write_text("x")
    secret = tmp_path / "secret"
    (secret / "inner").mkdir(parents=True)
    (secret / "canary-id_rsa").write_text("key")
    (secret / "inner" / "canary-deep.txt").write_text("key")

    class SwapWhileAsking(approver):
        async def approve(self, request):
            decision = await super().approve(request)
            os.rename(
                shared / "public", shared / "public.old"
            )  # a background process, during the question
            os.symlink(secret, shared / "public")
            return decision

    with pytest.raises(ToolError, match="changed while|cannot list"):
        run(
            ListDirTool(make_ctx(approver=SwapWhileAsking("y"))),
            path=str(shared / "public"),
            recursive=recursive,
        )


def test_a_recursive_list_does_not_enter_a_subfolder_swapped_for_a_link_mid_walk(
    make_ctx, ws, tmp_path
):
    from nanobot.tools import files

    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "canary-id_rsa").write_text("key")
    for name in ("a", "b"):
        (ws / name).mkdir()
        (ws / name / f"{name}.txt").write_text("x")
    real_sorted = files._sorted

    def swapping_sorted(fd):
        entries = real_sorted(fd)
        if any(
            e.name == "b" for e in entries
        ):  # the top level was just read: swap b before it is entered
            os.rename(ws / "b", ws / "b.old")
            os.symlink(secret, ws / "b")
        return entries

    files._sorted = swapping_sorted
    try:
        out = run(ListDirTool(make_ctx()), path=".", recursive=True)
    finally:
        files._sorted = real_sorted
    assert "canary-id_rsa" not in out and "a/a.txt" in out
