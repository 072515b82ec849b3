"""The one masker: every text bound for the provider, the screen or a saved file passes here.

Two kinds of secret are masked:
- exact values nanobot knows are secret: the configured API keys and the values of
  secret-looking environment variables (`remember_secrets` / `remember_environment`, called
  when the config is loaded);
- credentials that are unmistakable by shape (provider key prefixes, JWTs, PEM blocks,
  Bearer headers) and `name = value` assignments whose name says "key", "token", "secret" or
  "password". Prose, code and URLs are left alone, so unquoted assignment values are masked
  only when they contain a digit (`api_key=api_key` and `password: str` in code stay).

Who calls it: the tool registry (every tool result and the hint shown on screen), the
conversation (the user's message and the tool-call arguments before they are saved, the
one-shot JSON), the provider error mapping (error bodies), the memory store and the chat's
input history. Masking is idempotent: applying it twice changes nothing more.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

__all__ = [
    "mask_secrets",
    "find_secrets",
    "mask_value",
    "mask_message",
    "REDACTED",
    "PATTERNS",
    "remember_secrets",
    "remember_environment",
    "secret_env_values",
    "is_secret_name",
]

REDACTED = "[REDACTED]"

# Characters that may continue a key; a key must not start in the middle of a longer word.
_NB = r"(?<![A-Za-z0-9_\-])"
_NE = r"(?![A-Za-z0-9_\-])"
_DIGIT_AHEAD = r"(?=[A-Za-z0-9_\-]*\d)"
# The name's last word is enough to match on (OPENAI_API_KEY, db.password, mytoken); starting
# the match there, not at the name's start, keeps the scan linear on long texts.
_NAME = r"(?:api[_\-]?key|apikey|secret[_\-]?key|secret|access[_\-]?key|private[_\-]?key|token|password|passwd)"

# How to add one: append (label, regex). The regex may capture a group named `keep`
# (kept verbatim, e.g. a key's public prefix); everything else it matches becomes [REDACTED].
# Order matters: more specific shapes (sk-ant-) before general ones (sk-).
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "PEM private key",
        re.compile(
            r"(?P<keep>-----BEGIN (?P<kind>[A-Z0-9 ]*?)PRIVATE KEY-----)[\s\S]*?"
            r"(?:-----END (?P=kind)PRIVATE KEY-----|\Z)"
        ),
    ),
    ("Anthropic key", re.compile(_NB + r"(?P<keep>sk-ant-)[A-Za-z0-9_\-]{20,}")),
    (
        "OpenAI-style key",
        re.compile(  # OpenAI sk- / sk-proj-, OpenRouter sk-or-v1-, DeepSeek sk-
            _NB
            + r"(?P<keep>sk-(?:proj-|svcacct-|admin-|or-v1-)?)"
            + _DIGIT_AHEAD
            + r"[A-Za-z0-9_\-]{20,}"
        ),
    ),
    ("Stripe key", re.compile(_NB + r"(?P<keep>(?:sk|rk|pk)_(?:live|test)_)[A-Za-z0-9]{16,}")),
    ("GitHub token", re.compile(_NB + r"(?P<keep>gh[pousr]_)[A-Za-z0-9]{30,}")),
    ("GitHub fine-grained token", re.compile(_NB + r"(?P<keep>github_pat_)[A-Za-z0-9_]{22,}")),
    ("GitLab token", re.compile(_NB + r"(?P<keep>gl(?:pat|dt|rt|ptt|cbt)-)[A-Za-z0-9_\-]{20,}")),
    ("Hugging Face token", re.compile(_NB + r"(?P<keep>hf_)[A-Za-z0-9]{30,}" + _NE)),
    ("Groq key", re.compile(_NB + r"(?P<keep>gsk_)[A-Za-z0-9]{40,}")),
    ("xAI key", re.compile(_NB + r"(?P<keep>xai-)[A-Za-z0-9]{40,}")),
    ("npm token", re.compile(_NB + r"(?P<keep>npm_)[A-Za-z0-9]{36}" + _NE)),
    # (the literal first and the word edge checked behind it: a pattern that starts with \b or a lookbehind
    # is tried at every position of the text, 100 times slower on a large block)
    ("AWS access key", re.compile(r"(?P<keep>A[KS]IA)(?<=\bA[KS]IA)[0-9A-Z]{16}\b")),
    (
        "AWS secret key",
        re.compile(
            r"(?i)(?P<keep>\baws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?)"
            r"(?!\[REDACTED\])[A-Za-z0-9/+=]{30,}"
        ),
    ),
    ("Slack token", re.compile(_NB + r"(?P<keep>xox[abposre]-)[A-Za-z0-9\-]{10,}")),
    ("Google API key", re.compile(_NB + r"(?P<keep>AIza)[0-9A-Za-z_\-]{35}")),
    (
        "Telegram bot token",
        re.compile(r"(?<![A-Za-z0-9_:])(?P<keep>\d{8,10}:)AA[A-Za-z0-9_\-]{33}" + _NE),
    ),
    (
        "JWT",
        re.compile(
            r"(?P<keep>eyJ)(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
        ),
    ),
    (
        "Bearer token",
        re.compile(r"(?i)\b(?P<keep>bearer\s+)(?=[A-Za-z0-9._~+/\-]*\d)[A-Za-z0-9._~+/\-]{16,}=*"),
    ),
    (
        "Basic credentials",
        re.compile(r"(?i)(?P<keep>\bauthorization:\s*basic\s+)[A-Za-z0-9+/]{8,}=*"),
    ),
    (
        "netrc password",
        re.compile(
            r"(?im)(?P<keep>^[ \t]*(?:machine|default)\b[^\n]*?\bpassword\s+)"
            r"(?!\[REDACTED\])\S+"
        ),
    ),
    (
        "password in URL",
        re.compile(r"(?P<keep>\b[a-z][a-z0-9+.\-]*://[^\s:/@\[]+:)(?!\[REDACTED\])[^\s@/]+(?=@)"),
    ),
    (
        "quoted secret assignment",
        re.compile(
            r"(?i)(?P<keep>" + _NAME + r"[\"']?\s*[:=]\s*(?P<q>[\"']))"
            r"(?!\[REDACTED\](?P=q))[^\"'\n]{3,}?(?=(?P=q))"
        ),
    ),
    (
        "secret assignment",
        re.compile(
            r"(?i)(?P<keep>" + _NAME + r"[\"']?\s*[:=]\s*)"
            r"(?![\"'\[])(?=[^\s\"',;}&)\]]*\d)[^\s\"',;}&)\]]{6,}"
        ),
    ),
]

# A pattern runs only when one of its hints occurs in the lower-cased text (a C-speed `in`
# check), and the assignment patterns only on the lines that hold one: most text has none,
# and a long tool result is then scanned in a few milliseconds.
_ASSIGNMENT_WORDS = ("key", "token", "secret", "password", "passwd")
_HINTS: dict[str, tuple[str, ...]] = {
    "PEM private key": ("private key-----",),
    "Anthropic key": ("sk-ant-",),
    "OpenAI-style key": ("sk-",),
    "Stripe key": ("_live_", "_test_"),
    "GitHub token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "GitHub fine-grained token": ("github_pat_",),
    "GitLab token": ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-"),
    "Hugging Face token": ("hf_",),
    "Groq key": ("gsk_",),
    "xAI key": ("xai-",),
    "npm token": ("npm_",),
    "AWS access key": ("akia", "asia"),
    "AWS secret key": ("awssecret", "aws_secret"),
    "Slack token": ("xox",),
    "Google API key": ("aiza",),
    "Telegram bot token": (":aa",),
    "JWT": (".eyj",),
    "Bearer token": ("bearer",),
    "Basic credentials": ("basic",),
    "netrc password": ("password",),
    "password in URL": ("://",),
    "quoted secret assignment": _ASSIGNMENT_WORDS,
    "secret assignment": _ASSIGNMENT_WORDS,
}
_LINEWISE = frozenset({"quoted secret assignment", "secret assignment"})

# Exact secret values: what the config and the environment hold. Shorter values are not
# masked (they would hit ordinary words); each is replaced wherever it appears.
MIN_EXACT_LENGTH = 10  # dummy keys of local servers ("lm-studio", "EMPTY") stay readable
_known: set[str] = set()
_known_re: re.Pattern[str] | None = None

# The one rule for "this variable's name says it holds a secret" (exec's child environment, the
# values masked here, MCP servers' env): it contains one of the unmistakable words, or one of its
# parts is one of the part names and it does not end like a socket, file, folder or address.
# Part-wise, so SSH_AUTH_SOCK, TOKENIZERS_PARALLELISM and KEYBOARD_LAYOUT are left alone.
_SECRET_NAME_PARTS = frozenset(
    {
        "KEY",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "CREDENTIALS",
        "PAT",
        "AUTH",
        "PRIVATE",
    }
)
_SECRET_NAME_WORDS = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
)
_NOT_SECRET_SUFFIXES = ("_SOCK", "_FILE", "_PATH", "_DIR", "_URL", "_HOST", "_PORT")


@lru_cache(
    maxsize=4096
)  # a function of the name alone; exec asks it for every variable, every call
def is_secret_name(name: str) -> bool:
    """True for names that say they hold a credential (OPENAI_API_KEY, PGPASSWORD, GH_TOKEN, db.password)."""
    upper = name.upper()
    if any(word in upper for word in _SECRET_NAME_WORDS):
        return True
    return not upper.endswith(_NOT_SECRET_SUFFIXES) and bool(
        _SECRET_NAME_PARTS & set(re.split(r"[_\-.]", upper))
    )


def remember_secrets(values: Iterable[str]) -> None:
    """Add exact values to mask from now on (configured keys, secret environment values)."""
    global _known_re
    added = {v.strip() for v in values if isinstance(v, str) and len(v.strip()) >= MIN_EXACT_LENGTH}
    if not added - _known:
        return
    _known.update(added)
    # longest first, so a value that contains another is replaced whole
    _known_re = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


def remembered_secrets() -> list[str]:
    """The exact values remembered so far (for a helper process that must mask the same way)."""
    return sorted(_known)


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of environment variables whose names say they hold a secret."""
    env = os.environ if environ is None else environ
    found = []
    for name, value in env.items():
        if value and not value.startswith("/") and is_secret_name(name):
            found.append(value)
    return found


def remember_environment(environ: Mapping[str, str] | None = None) -> None:
    remember_secrets(secret_env_values(environ))


def _replace(match: re.Match[str]) -> str:
    keep = match.groupdict().get("keep") or ""
    if match.re is PATTERNS[0][1]:
        kind = match.group("kind") or ""
        return f"{keep}\n{REDACTED}\n-----END {kind}PRIVATE KEY-----"
    return keep + REDACTED


def _scan(text: str, labels: list[str] | None) -> str:
    if _known_re is not None:
        text, count = _known_re.subn(REDACTED, text)
        if count and labels is not None:
            labels.append("a configured key or secret environment value")
    low = text.lower()
    for label, pattern in PATTERNS:
        hints = _HINTS.get(label, ())
        if hints and not any(h in low for h in hints):
            continue
        if label in _LINEWISE:
            text, count = _sub_lines(pattern, text, hints)
        else:
            text, count = pattern.subn(_replace, text)
        if count:
            low = text.lower()
            if labels is not None and label not in labels:
                labels.append(label)
    return text


def _sub_lines(pattern: re.Pattern[str], text: str, hints: tuple[str, ...]) -> tuple[str, int]:
    lines = text.split("\n")
    total = 0
    for i, line in enumerate(lines):
        if ("=" in line or ":" in line) and any(h in line.lower() for h in hints):
            lines[i], count = pattern.subn(_replace, line)
            total += count
    return ("\n".join(lines), total) if total else (text, 0)


# Long texts masked lately, with the exact-value pattern they were masked under: the system prompt
# is masked several times a turn (each budget estimate, then the request) and is the same text.
_MEMO_MIN_CHARS = 1024
_MEMO_SIZE = 8
_memo: OrderedDict[str, tuple[re.Pattern[str] | None, str]] = OrderedDict()
_memo_lock = threading.Lock()


def mask_secrets(text: str) -> str:
    """`text` with secrets replaced by [REDACTED]; applying it twice changes nothing more."""
    if not text or not isinstance(text, str):
        return text
    if len(text) < _MEMO_MIN_CHARS:
        return _scan(text, None)
    known = (
        _known_re  # a new secret makes a new pattern, so a text masked before it is masked again
    )
    with _memo_lock:
        hit = _memo.get(text)
        if hit is not None and hit[0] is known:
            _memo.move_to_end(text)
            return hit[1]
    masked = _scan(text, None)
    with _memo_lock:
        _memo[text] = (known, masked)
        _memo.move_to_end(text)
        if len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return masked


def find_secrets(text: str) -> tuple[str, list[str]]:
    """(the masked text, labels of what was masked), e.g. to tell the user their message held a key."""
    if not text or not isinstance(text, str):
        return text, []
    labels: list[str] = []
    masked = _scan(text, labels)
    return masked, labels if masked != text else []


def mask_value(value: Any) -> Any:
    """Every string inside a JSON-like value masked (mappings, sequences such as a session's lazily
    loaded message list, which come back as plain lists); other values unchanged."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, Mapping):
        return {k: mask_value(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [mask_value(v) for v in value]
    return value


def _mask_arguments(arguments: Any) -> Any:
    """Tool-call arguments as JSON text stay valid JSON: parse, mask the values, dump again."""
    if not isinstance(arguments, str):
        return mask_value(arguments)
    masked = mask_secrets(arguments)
    if masked == arguments:
        return arguments
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return masked
    return json.dumps(mask_value(parsed), ensure_ascii=False)


def mask_message(msg: Any) -> Any:
    """A chat message with its text, its parts and its tool-call arguments masked (a copy)."""
    if not isinstance(msg, dict):
        return msg
    out = {key: mask_value(value) for key, value in msg.items() if key != "tool_calls"}
    calls = msg.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {
                **call,
                "function": {
                    **call["function"],
                    "arguments": _mask_arguments(call["function"].get("arguments")),
                },
            }
            if isinstance(call, dict) and isinstance(call.get("function"), dict)
            else call
            for call in calls
        ]
    elif "tool_calls" in msg:
        out["tool_calls"] = calls
    return out
