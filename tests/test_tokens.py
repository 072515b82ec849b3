"""Token estimates: offline cl100k, conservative fallback, per-message cache, calibration."""

from __future__ import annotations

import functools
import re
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot import messages as m
from nanobot import tokens
from nanobot.tokens import Calibration, TokenCounter, fallback_count, load_offline_encoding

ENGLISH = "The quick brown fox jumps over the lazy dog while the user asks about their calendar."
CHINESE = (
    "我们今天讨论了项目的进度，决定下周一开始重构记忆系统。用户喜欢简洁的回答，并且使用深色主题。"
)


@functools.cache
def exact_encode():
    """The exact cl100k encoder, loaded once for the whole file (a load reads and indexes the ranks)."""
    encode, reason = load_offline_encoding()
    assert encode is not None, reason
    return encode


CODE = "def atomic_write(path, data):\n    fd, tmp = tempfile.mkstemp(dir=path.parent)\n    os.replace(tmp, path)\n"


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_offline_encoding_loads_without_network_into_an_empty_cache(
    no_network, tmp_path, monkeypatch
):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    assert not any((tmp_path / "tiktoken-cache").glob("*"))
    encode, reason = load_offline_encoding()
    assert reason is None
    assert encode("hello world") == [15339, 1917]


def test_known_counts_with_the_real_encoding():
    assert tokens.count_text("hello world") == 2
    assert tokens.count_text("") == 0
    assert tokens.estimator_name() == "cl100k_base, exact (offline ranks)"
    assert not tokens.using_fallback()


def test_importing_nanobot_tokens_does_not_import_tiktoken():
    code = (
        "import sys, nanobot.tokens, nanobot.memory.store; "
        "print(any(m in sys.modules for m in ('tiktoken', 'regex')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unknown_encoding_reports_a_reason_instead_of_downloading(no_network):
    encode, reason = load_offline_encoding("no_such_encoding_offline")
    assert encode is None and reason


def test_forced_fallback_is_named_and_never_zero(monkeypatch):
    monkeypatch.setenv(tokens.ENV_TOKENIZER, "fallback")
    assert tokens.using_fallback()
    name = tokens.estimator_name()
    assert name.startswith("fallback:") and "NANOBOT_TOKENIZER=fallback" in name
    assert tokens.count_text("a") == 1
    assert tokens.count_message(m.user("")) > 0


def _dense_samples() -> dict[str, str]:
    """Tool output of the kinds that bytes / 3 under-counted by 1.5-2.2x."""
    import base64
    import hashlib
    import json as _json
    import random

    rng = random.Random(7)
    blob = bytes(rng.randrange(256) for _ in range(6000))
    return {
        "code": CODE * 20,
        "json lines": "\n".join(
            _json.dumps({"id": i, "ok": i % 3 == 0, "v": rng.random()}) for i in range(300)
        ),
        "csv": "\n".join(
            ",".join(str(rng.randint(0, 99999)) for _ in range(8)) for _ in range(300)
        ),
        "ls -l": "\n".join(
            f"-rw-r--r-- 1 ana staff {rng.randint(1, 10**6):>8} Jan  5 10:{i % 60:02d} f{i}.py"
            for i in range(300)
        ),
        "base64": base64.b64encode(blob).decode(),
        "hex": blob.hex(),
        "sha256 list": "\n".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)),
        "cjk": CHINESE * 40 + "日本語のテキストと한국어 텍스트" * 40,
        "emoji": "😀🎉🚀👍🏽👨‍👩‍👧‍👦🇦🇷" * 200,
        "prose": ENGLISH * 20,
    }


@pytest.mark.parametrize("kind", list(_dense_samples()))
def test_fallback_is_a_true_upper_bound_on_dense_tool_output(kind):
    text = _dense_samples()[kind]
    exact = TokenCounter(load_offline_encoding()[0])
    fallback = TokenCounter(None, fallback_reason="test")
    assert fallback_count(text) >= exact.count_text(text) > 0
    msg = {"role": "tool", "tool_call_id": "call_1", "name": "exec", "content": text}
    assert fallback.count_message(msg) >= exact.count_message(msg)
    call = m.assistant(None, [m.tool_call("call_2", "write_file", {"path": "x", "content": text})])
    assert fallback.count_message(call) >= exact.count_message(call)


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
@settings(deadline=None)
def test_fallback_is_never_below_tiktoken(text):
    assert fallback_count(text) >= TokenCounter(exact_encode()).count_text(text)


def test_message_count_includes_tool_calls_and_ids():
    counter = tokens.default_counter()
    plain = m.assistant("checking")
    with_call = m.assistant(
        "checking", [m.tool_call("call_1", "read_file", {"path": "/tmp/notes.txt"})]
    )
    assert counter.count_message(with_call) > counter.count_message(plain) + 5
    result = m.tool_result("call_1", "read_file", "contents")
    assert counter.count_message(result) > counter.count_text("contents") + tokens.MESSAGE_OVERHEAD


def test_content_parts_count_their_text_and_images():
    counter = tokens.default_counter()
    parts = [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    n = counter.count_message(m.user(parts))
    assert n >= tokens.IMAGE_TOKENS + counter.count_text("what is in this picture?")


def test_a_message_is_tokenised_once():
    calls = []
    encode = load_offline_encoding()[0]

    def spy(text):
        calls.append(text)
        return encode(text)

    counter = TokenCounter(spy)
    history = [
        m.user(ENGLISH),
        m.assistant("sure", [m.tool_call("c1", "exec", {"cmd": "ls"})]),
        m.tool_result("c1", "exec", "a.txt\nb.txt"),
        m.assistant("done"),
    ]
    first = counter.count_messages(history)
    n_calls = len(calls)
    # Same content in fresh dicts (as after reloading a session) still hits the cache.
    reloaded = [dict(x) for x in history]
    assert counter.count_messages(reloaded) == first
    assert len(calls) == n_calls
    assert counter.hits == len(history)
    # A changed message is counted again.
    counter.count_message(m.user(ENGLISH + "!"))
    assert len(calls) > n_calls


def test_one_long_text_in_many_messages_is_encoded_once():
    calls = []
    encode = load_offline_encoding()[0]

    def spy(text):
        calls.append(text)
        return encode(text)

    output = CODE * 40  # one file's contents, returned by forty calls that read it
    counter = TokenCounter(spy)
    results = [m.tool_result(f"c{i}", "read_file", output) for i in range(40)]
    counts = [counter.count_message(r) for r in results]
    assert calls.count(output) == 1
    assert counts == [
        TokenCounter(encode).count_message(r) for r in results
    ]  # the same as counting each
    assert len(set(counts)) == 1 and counts[0] > len(encode(output))
    assert (
        counter.count_text(output + "!") != 0 and calls.count(output + "!") == 1
    )  # other text: counted anew


def test_cache_is_bounded():
    counter = TokenCounter(None, max_cache=3)
    for i in range(10):
        counter.count_message(m.user(f"message {i}"))
    assert len(counter._cache) == 3


def test_count_tools_counts_the_schema():
    schema = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert tokens.count_tools(schema) > 10
    assert tokens.count_tools([]) == 0


def test_calibration_only_ever_raises_and_is_capped():
    cal = Calibration()
    assert cal.adjust(1000) == 1000
    cal.observe(1000, 800)  # provider counted fewer: keep the safe estimate
    assert cal.adjust(1000) == 1000
    cal.observe(1000, 1250)
    assert cal.adjust(1000) == 1250
    cal.observe(2000, 2100)  # a smaller later ratio does not undo the larger one
    assert cal.ratio == pytest.approx(1.25)
    cal.observe(1000, 9000)
    assert cal.ratio == 2.0


def test_calibration_ignores_tiny_requests_and_missing_usage():
    cal = Calibration(min_estimate=500)
    cal.observe(50, 400)
    cal.observe(1000, None)
    cal.observe(1000, 0)
    assert cal.ratio == 1.0


def test_calibration_forgets_old_ratios():
    cal = Calibration(window=2)
    cal.observe(1000, 1500)
    cal.observe(1000, 1100)
    cal.observe(1000, 1100)
    assert cal.ratio == pytest.approx(1.1)


def test_a_missing_encoding_falls_back_and_status_says_why(monkeypatch):
    monkeypatch.setattr(tokens, "_loader", tokens._Loader())
    monkeypatch.setattr(
        tokens, "load_offline_encoding", lambda: (None, "ValueError: Unknown encoding")
    )
    monkeypatch.setattr(tokens, "_counters", {})
    assert tokens.estimator_name() == (
        "fallback: UTF-8 bytes, an upper bound (tiktoken encoding unavailable: ValueError: Unknown encoding)"
    )
    assert tokens.count_text("hello world") == 11


@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=400), max_size=6))
@settings(deadline=None)
def test_byte_bound_is_never_below_the_exact_count(texts):
    from nanobot.tokens import byte_bound

    counter = TokenCounter(exact_encode())
    messages = [{"role": "user", "content": t} for t in texts]
    assert byte_bound(messages) >= counter.count_messages(messages)


def test_byte_bound_holds_for_dense_text():
    import base64
    import os as _os

    from nanobot.tokens import byte_bound

    counter = TokenCounter(load_offline_encoding()[0])
    for text in (
        base64.b64encode(_os.urandom(3000)).decode(),
        "你好世界" * 500,
        "🙂🚀" * 400,
        "{}[]();" * 500,
    ):
        msg = {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": text}
        assert byte_bound([msg]) >= counter.count_message(msg)


def test_an_ordinary_one_shot_turn_does_not_load_the_encoding(configure, fake_llm, tmp_path):
    import subprocess
    import sys

    from nanobot.fakellm import Reply

    configure()
    fake_llm.script(Reply.text("hello"))
    code = (
        "import sys\nimport nanobot.tokens as t\nloads = []\norig = t.load_offline_encoding\n"
        "t.load_offline_encoding = lambda *a, **k: loads.append(1) or orig(*a, **k)\n"
        "sys.argv = ['nanobot', 'agent', '-m', 'hi']\nfrom nanobot.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('LOADS', len(loads))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "hello" in out.stdout and "LOADS 0" in out.stdout, out.stderr[-2000:]


# -- giant runs: a pasted line without spaces is not handed to the tokenizer whole ---------------


def _recording(encode):
    seen: list[int] = []

    def wrapped(text: str) -> list[int]:
        seen.append(len(text))
        return encode(text)

    return wrapped, seen


def test_a_giant_word_is_counted_by_its_bytes_and_never_encoded_whole():
    encode, seen = _recording(exact_encode())
    counter = TokenCounter(encode)
    word = "ab9Z" * 250_000  # 1 MB without a space: one piece to cl100k, minutes of merging
    text = f"Here is the blob I pasted:\n{word}\nWhat is in it? ünïcödé done."
    n = counter.count_text(text)
    assert max(seen) < tokens.GIANT_RUN_CHARS  # the 1 MB run never reached the encoder
    head, tail = text.split(word)
    exact_around = len(exact_encode()(head)) + len(exact_encode()(tail))
    assert n == exact_around + len(word.encode("utf-8"))  # the run by its bytes, the rest exactly
    assert n <= len(text.encode("utf-8"))  # sane: never above the text's own byte bound


def test_a_giant_run_of_spaces_or_symbols_is_bounded_too():
    encode, seen = _recording(exact_encode())
    counter = TokenCounter(encode)
    for run in (" " * 300_000, "=" * 300_000, "\n" * 300_000, "写" * 100_000):
        seen.clear()
        n = counter.count_text(f"before {run} after")
        assert max(seen) < tokens.GIANT_RUN_CHARS
        assert len(exact_encode()("before after")) <= n <= len(f"before {run} after".encode())


def test_ordinary_text_is_still_counted_exactly():
    text = (ENGLISH + " " + CHINESE + "\n" + CODE) * 40  # long, but no run near the limit
    assert len(text) > tokens.GIANT_RUN_CHARS
    assert TokenCounter(exact_encode()).count_text(text) == len(exact_encode()(text))


@settings(deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "word",
                " ",
                "  ",
                "\n",
                "x" * 9,
                "=" * 9,
                " " * 9,
                "12345",
                "é写",
                "'s",
                "\r\n",
                "\t",
                ".",
                "abc=def",
            ]
        ),
        max_size=40,
    ).map("".join)
)
def test_counting_giant_runs_by_bytes_never_counts_less_than_the_tokenizer(text):
    exact = len(exact_encode()(text))
    bounded = tokens.encoded_length(
        exact_encode(), text, limit=8
    )  # every run of 8+ is "giant" here
    assert exact <= bounded <= len(text.encode("utf-8"))
    if any(len(run) >= 8 for run in re.findall(r"\S+|\s+", text)):  # the quick check misses none
        assert tokens._may_hold_giant_run(text, 8)
