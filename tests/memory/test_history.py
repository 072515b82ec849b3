"""HISTORY.md parsing and search: whole entries, dates, streaming."""

from __future__ import annotations

import random
import re
import tracemalloc
from datetime import datetime
from pathlib import Path

import pytest
from nanobot.memory import history as history_log
from nanobot.memory.history import Entry, grep, iter_entries, parse_when, tail

SAMPLE = """Notes kept by hand before nanobot existed.
Second preamble line.

[2026-01-05 09:00] User asked about the Rust borrow checker.
They want notes by Friday.

[2026-01-20 18:30] Discussed a trip to LISBON; user prefers trains.

[2026-02-02 07:45] Weather questions; user lives in Porto.

[2026-02-15 12:00:30] Planned the lisbon talk. Slides due 2026-03-01.
"""


@pytest.fixture
def history(tmp_path: Path) -> Path:
    path = tmp_path / "HISTORY.md"
    path.write_text(SAMPLE)
    return path


def test_entries_are_parsed_with_stamps_and_line_numbers(history):
    entries = list(iter_entries(history))
    assert [e.stamp for e in entries] == [
        None,
        datetime(2026, 1, 5, 9, 0),
        datetime(2026, 1, 20, 18, 30),
        datetime(2026, 2, 2, 7, 45),
        datetime(2026, 2, 15, 12, 0, 30),
    ]
    assert [e.line_no for e in entries] == [1, 4, 7, 9, 11]
    assert entries[0].text == "Notes kept by hand before nanobot existed.\nSecond preamble line."
    assert (
        entries[1].text
        == "[2026-01-05 09:00] User asked about the Rust borrow checker.\nThey want notes by Friday."
    )


def test_grep_returns_whole_entries(history):
    found = grep(history, "Friday")
    assert [e.text for e in found] == [
        "[2026-01-05 09:00] User asked about the Rust borrow checker.\nThey want notes by Friday."
    ]


def test_grep_ignore_case(history):
    assert len(grep(history, "lisbon")) == 1
    assert len(grep(history, "lisbon", ignore_case=True)) == 2


def test_grep_since_until_are_inclusive_and_skip_undated(history):
    assert [e.line_no for e in grep(history, "e", since=parse_when("2026-02-02"))] == [9, 11]
    until = parse_when("2026-01-20", end_of_day=True)
    assert [e.line_no for e in grep(history, "e", until=until)] == [4, 7]
    assert [e.line_no for e in grep(history, "Notes|notes")] == [1, 4]
    assert [e.line_no for e in grep(history, "Notes|notes", since=parse_when("2000-01-01"))] == [4]


def test_grep_last_keeps_the_last_matches(history):
    assert [e.line_no for e in grep(history, "user", ignore_case=True)] == [4, 7, 9]
    assert [e.line_no for e in grep(history, "user", ignore_case=True, last=2)] == [7, 9]
    assert grep(history, "nothing-like-this", last=3) == []


def test_grep_uses_line_anchors_like_grep(history):
    assert [e.line_no for e in grep(history, r"^They want")] == [4]
    assert [e.line_no for e in grep(history, r"trains\.$")] == [7]


def test_a_match_spanning_two_entries_matches_neither(history):
    assert grep(history, r"Friday\.\s+\[2026") == []


def test_parse_when_rejects_nonsense():
    with pytest.raises(ValueError):
        parse_when("last tuesday")
    assert parse_when("2026-03-01 14:05") == datetime(2026, 3, 1, 14, 5)


def test_tail_returns_the_last_entries(history):
    assert [e.line_no for e in tail(history, 2)] == [9, 11]
    assert [e.line_no for e in tail(history, 50)] == [1, 4, 7, 9, 11]


def test_file_without_stamps_is_one_undated_entry(tmp_path):
    path = tmp_path / "HISTORY.md"
    path.write_text("just some text\nand more\n")
    assert list(iter_entries(path)) == [Entry(None, "just some text\nand more", 1)]
    assert tail(path, 1) == [Entry(None, "just some text\nand more", 1)]


def _synthetic(tmp_path: Path, n: int, seed: int = 7) -> tuple[Path, list[str]]:
    rng = random.Random(seed)
    words = "alpha beta gamma delta lisbon porto rust tea trains deadline".split()
    texts = []
    for i in range(n):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(3, 40)))
        if rng.random() < 0.2:
            body += "\n" + " ".join(rng.choice(words) for _ in range(5))
        texts.append(
            f"[2026-{1 + i % 12:02d}-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}] entry {i}: {body}"
        )
    path = tmp_path / "HISTORY.md"
    path.write_text("\n\n".join(texts) + "\n\n", encoding="utf-8")
    return path, texts


@pytest.mark.parametrize("block_size", [64, 1000, 1 << 20])
def test_block_boundaries_never_split_entries(tmp_path, monkeypatch, block_size):
    monkeypatch.setattr(history_log, "BLOCK_SIZE", block_size)
    path, texts = _synthetic(tmp_path, 400)
    entries = list(iter_entries(path))
    assert [e.text for e in entries] == texts
    lines = path.read_text().splitlines()
    assert all(lines[e.line_no - 1] == e.text.splitlines()[0] for e in entries)
    rx = re.compile(r"lisbon\s+tea", re.M)
    assert [e.text for e in grep(path, rx)] == [t for t in texts if rx.search(t)]
    assert [e.text for e in tail(path, 7)] == texts[-7:]


def test_large_file_is_streamed_not_loaded(tmp_path, monkeypatch):
    # the file is 40 blocks long: read whole, the peak would be its size; streamed, a few blocks
    monkeypatch.setattr(history_log, "BLOCK_SIZE", 64 * 1024)
    path, texts = _synthetic(tmp_path, 20_000)
    size = path.stat().st_size
    assert size > 40 * 64 * 1024
    tracemalloc.start()
    count = sum(1 for _ in iter_entries(path))
    found = grep(path, "entry 19999:")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == len(texts)
    assert [e.text for e in found] == [texts[-1]]
    assert peak < size / 4


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_WORD = st.text(alphabet="abSsßKk [].\n\u0130", min_size=0, max_size=12)


@settings(deadline=None)
@given(
    bodies=st.lists(_WORD, min_size=1, max_size=12),
    pattern=st.text(alphabet="abSsßKk. $^", min_size=1, max_size=3),
    ignore_case=st.booleans(),
    block=st.sampled_from([8, 32, 4096]),
)
def test_grep_agrees_with_matching_each_entry_alone(
    tmp_path_factory, bodies, pattern, ignore_case, block
):
    path = tmp_path_factory.mktemp("h") / "HISTORY.md"
    texts = [f"[2026-01-{1 + i % 28:02d} 10:00] {b}" for i, b in enumerate(bodies)]
    path.write_text("".join(t + "\n\n" for t in texts), encoding="utf-8")
    rx = history_log.compile_pattern(pattern, ignore_case=ignore_case)
    old = history_log.BLOCK_SIZE
    history_log.BLOCK_SIZE = block
    try:
        # The reference: each entry's own text (line ends stripped) searched on its own.
        expected = [t.rstrip() for t in texts if rx.search(t.rstrip("\n"))]
        got = [e.text for e in grep(path, rx)]
    finally:
        history_log.BLOCK_SIZE = old
    assert got == expected


# -- the ripgrep fast path gives exactly what the Python engine gives ------------------------------

TRICKY = (
    "preamble line without a stamp, lisbon\n\n"
    "[2026-01-01 10:00] first lisbon entry\n  continued line\n[not a stamp] still the first entry\n\n\n"
    "[2026-01-02 10:00:30] CRLF entry Lisbon\r\n\r\n"
    "[2026-01-03T11:00] trailing unicode space lisbon\u00a0\u3000\n\n"
    "[2026-01-04 12:00] café and naïve, lisbon\n\n"
    "[2026-01-05 12:00] ends with a file separator lisbon\x1c\n\n"
    "[2026-01-06 12:00] deadline soon release notes\n\n"
    "[2026-13-45 99:99] impossible date lisbon\n\n"
    "[2026-01-07 12:00] last one, no newline at the end: lisbon"
)
PATTERNS = [
    "lisbon",
    "Lisbon",
    "^\\[2026-01-0[1-4]",
    "lisbon$",
    "deadline \\w+ release",
    "caf. and",
    "(first|last) (lisbon|one)",
    "\\d{2}:\\d{2}\\] [A-Z]",
    "[0-9]{4}-0[15]",
    "zzz",
    "lisbon\\b",
]


@pytest.mark.parametrize("ignore_case", [False, True])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_fast_grep_output_is_byte_for_byte_the_python_engines(tmp_path, pattern, ignore_case):
    path = tmp_path / "HISTORY.md"
    path.write_bytes(TRICKY.encode() + b"\n\n[2026-02-01 10:00] bad byte \xff lisbon\n")
    slow = history_log.grep(path, pattern, ignore_case=ignore_case)
    out, count = history_log.grep_fast_output(path, pattern, ignore_case=ignore_case)
    assert out == "".join(e.text + "\n\n" for e in slow).encode() and count == len(slow)
    assert history_log.grep_fast(path, pattern, ignore_case=ignore_case) == slow
    since = history_log.parse_when("2026-01-02")
    assert history_log.grep_fast(
        path, pattern, ignore_case=ignore_case, since=since, last=2
    ) == history_log.grep(path, pattern, ignore_case=ignore_case, since=since, last=2)


def test_fast_grep_with_many_matches_uses_the_entry_table_and_stays_exact(tmp_path, monkeypatch):
    path = tmp_path / "HISTORY.md"
    path.write_text(TRICKY * 50)
    monkeypatch.setattr(history_log, "_FEW_MATCHES", 3)
    for pattern in ("lisbon", "^\\[2026"):
        slow = history_log.grep(path, pattern)
        assert (
            history_log.grep_fast_output(path, pattern)[0]
            == "".join(e.text + "\n\n" for e in slow).encode()
        )


def test_fast_grep_with_many_matches_on_few_lines_stays_exact(tmp_path, monkeypatch):
    # the probe counts matches, not lines: 5 matches on 2 lines is "maybe more" at 3, and the full
    # run then finds both entries (and no others) as the Python engine does
    path = tmp_path / "HISTORY.md"
    path.write_text(
        "[2026-01-01 10:00] lisbon lisbon lisbon\n\n[2026-01-02 10:00] porto\n\n"
        "[2026-01-03 10:00] lisbon again, lisbon\n  more lines\n\n[2026-01-04 10:00] end\n"
    )
    monkeypatch.setattr(history_log, "_FEW_MATCHES", 3)
    slow = history_log.grep(path, "lisbon")
    out, count = history_log.grep_fast_output(path, "lisbon")
    assert count == len(slow) == 2
    assert out == "".join(e.text + "\n\n" for e in slow).encode()
    assert history_log.grep_fast(path, "lisbon") == slow


@pytest.mark.parametrize(
    "pattern", ["lisbon\\s+x", "[^a]", "(?s)a.b", "(?<=a)b", "(a)\\1", "x*", "\\n", "a{,2}b"]
)
def test_patterns_only_python_can_take_leave_the_fast_path(tmp_path, pattern):
    path = tmp_path / "HISTORY.md"
    path.write_text(TRICKY)
    assert history_log.grep_fast_output(path, pattern) is None


# -- the fast path cuts runs of adjacent entries as one slice of the file; every way an entry can
# end (and begin) must still print exactly what the entry-by-entry engine prints

_ENDINGS = [
    b"\n\n",
    b"\n",
    b"\n\n\n",
    b" \n\n",
    b"\t\n\n",
    b"\r\n\r\n",
    b"\r\n",
    b"\xc2\xa0\n\n",
    b"\xe3\x80\x80\n\n",
    b"\x1c\n\n",
    b"\x1f\n",
    "é\n\n".encode(),
    b"\xff\n\n",
    b"\xe3\x80\n\n",
    b"\n\n\x0b\n",
]
_LINES = [
    b"lisbon",
    b"porto and lisbon",
    b"Lisbon",
    "café lisbon".encode(),
    b"  continued",
    b"[not a stamp] lisbon",
    b"",
    b"porto",
    b"tea \xff\xfe lisbon",
    b"[2026-13-45 99:99] impossible date lisbon",
]
_FAST_PATTERNS = [
    "lisbon",
    "lisbon$",
    "^\\[2026",
    "caf. l",
    "(lisbon|porto)",
    "^porto",
    "on$",
    "\\d\\] L",
]


@settings(deadline=None)
@given(
    preamble=st.sampled_from(
        [b"", b"\n", b"\n\n", b"  \n", b"notes lisbon\n\n", b"x\n", b"porto\r\n"]
    ),
    entries=st.lists(
        st.tuples(
            st.lists(st.sampled_from(_LINES), min_size=1, max_size=3), st.sampled_from(_ENDINGS)
        ),
        min_size=1,
        max_size=8,
    ),
    final=st.sampled_from([b"", b"\n", b"\n\n", b" "]),
    pattern=st.sampled_from(_FAST_PATTERNS),
    ignore_case=st.booleans(),
    few=st.sampled_from([1, 50_000]),
    piece=st.sampled_from([1, 40, 1 << 20]),
)
def test_fast_grep_prints_what_the_python_engine_prints_however_entries_end(
    tmp_path_factory, preamble, entries, final, pattern, ignore_case, few, piece
):
    parts = [preamble]
    for i, (lines, ending) in enumerate(entries):
        parts.append(b"[2026-01-%02d 10:00] " % (1 + i) + b"\n".join(lines) + ending)
    data = b"".join(parts).rstrip(b"\n") + final if final != b"\n\n" else b"".join(parts)
    path = tmp_path_factory.mktemp("h") / "HISTORY.md"
    path.write_bytes(data)
    slow = history_log.grep(path, pattern, ignore_case=ignore_case)
    old = history_log._FEW_MATCHES, history_log._PIECE
    history_log._FEW_MATCHES = (
        few  # 1: through the entry table; 50,000: each entry found around its match
    )
    history_log._PIECE = piece  # 1: every run of entries is a piece of its own
    try:
        got = history_log.grep_fast_output(path, pattern, ignore_case=ignore_case)
    finally:
        history_log._FEW_MATCHES, history_log._PIECE = old
    assert got == ("".join(e.text + "\n\n" for e in slow).encode(), len(slow))


def test_adjacent_matching_entries_and_a_match_on_an_entrys_last_line(tmp_path):
    # entries 1-3 match (1 on its last line) and touch; 4 does not; 5 matches, has no final newline
    path = tmp_path / "HISTORY.md"
    path.write_bytes(
        b"[2026-01-01 10:00] first\nsecond line\nlast line lisbon\n\n"
        b"[2026-01-02 10:00] lisbon at once\n\n"
        b"[2026-01-03 10:00] CRLF lisbon\r\n\r\n"
        b"[2026-01-04 10:00] porto\n\n"
        b"[2026-01-05 10:00] the end, lisbon"
    )
    out, count = history_log.grep_fast_output(path, "lisbon")
    assert count == 4
    assert out == (
        b"[2026-01-01 10:00] first\nsecond line\nlast line lisbon\n\n"
        b"[2026-01-02 10:00] lisbon at once\n\n"
        b"[2026-01-03 10:00] CRLF lisbon\n\n"
        b"[2026-01-05 10:00] the end, lisbon\n\n"
    )


@pytest.mark.parametrize("pattern", ["b", "7", "^7$", "b7"])
def test_fast_grep_finds_entries_by_one_character_lines(tmp_path, pattern):
    # ripgrep reports each matching line by where it starts; a line as short as its note (or made of
    # digits, like the offsets) must still be read as one line
    path = tmp_path / "HISTORY.md"
    path.write_text(
        "[2026-01-01 10:00] a\nb\n7\n\n[2026-01-02 10:00] c\n\n[2026-01-03 10:00] b7\n7"
    )
    slow = history_log.grep(path, pattern)
    assert slow
    assert history_log.grep_fast_output(path, pattern) == (
        "".join(e.text + "\n\n" for e in slow).encode(),
        len(slow),
    )
    assert history_log.grep_fast(path, pattern) == slow
