"""Masks obvious secrets before text reaches MEMORY.md or HISTORY.md.

Aimed at credentials that are unmistakable by shape (provider key prefixes, PEM blocks) and at
`name = value` assignments whose name says "key", "token", "secret" or "password". It must
leave prose, code and URLs alone, so unquoted assignment values are masked only when they
contain a digit (`api_key=api_key` and `password: str` in code stay as they are).
"""

from __future__ import annotations

import re

__all__ = ["mask_secrets", "REDACTED", "PATTERNS"]

REDACTED = "[REDACTED]"

# Characters that may continue a key; a key must not start in the middle of a longer word.
_NB = r"(?<![A-Za-z0-9_\-])"
_DIGIT_AHEAD = r"(?=[A-Za-z0-9_\-]*\d)"
_NAME = (r"[A-Za-z0-9_.\-]*(?:api[_\-]?key|apikey|secret[_\-]?key|secret|access[_\-]?key"
         r"|private[_\-]?key|token|password|passwd)")

# How to add one: append (label, regex). The regex may capture a group named `keep`
# (kept verbatim, e.g. a key's public prefix); everything else it matches becomes [REDACTED].
# Order matters: more specific shapes (sk-ant-) before general ones (sk-).
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("PEM private key", re.compile(
        r"(?P<keep>-----BEGIN (?P<kind>[A-Z0-9 ]*?)PRIVATE KEY-----)[\s\S]*?"
        r"(?:-----END (?P=kind)PRIVATE KEY-----|\Z)")),
    ("Anthropic key", re.compile(_NB + r"(?P<keep>sk-ant-)[A-Za-z0-9_\-]{20,}")),
    ("OpenAI-style key", re.compile(
        _NB + r"(?P<keep>sk-(?:proj-|svcacct-|admin-|or-v1-)?)" + _DIGIT_AHEAD + r"[A-Za-z0-9_\-]{20,}")),
    ("GitHub token", re.compile(_NB + r"(?P<keep>gh[pousr]_)[A-Za-z0-9]{30,}")),
    ("GitHub fine-grained token", re.compile(_NB + r"(?P<keep>github_pat_)[A-Za-z0-9_]{22,}")),
    ("AWS access key", re.compile(r"\b(?P<keep>(?:AKIA|ASIA))[0-9A-Z]{16}\b")),
    ("Slack token", re.compile(_NB + r"(?P<keep>xox[abposr]-)[A-Za-z0-9\-]{10,}")),
    ("Google API key", re.compile(_NB + r"(?P<keep>AIza)[0-9A-Za-z_\-]{35}")),
    ("Bearer token", re.compile(
        r"(?i)\b(?P<keep>bearer\s+)(?=[A-Za-z0-9._~+/\-]*\d)[A-Za-z0-9._~+/\-]{16,}=*")),
    ("password in URL", re.compile(
        r"(?P<keep>\b[a-z][a-z0-9+.\-]*://[^\s:/@\[]+:)(?!\[REDACTED\])[^\s@/]+(?=@)")),
    ("quoted secret assignment", re.compile(
        r"(?i)(?P<keep>\b" + _NAME + r"[\"']?\s*[:=]\s*(?P<q>[\"']))"
        r"(?!\[REDACTED\](?P=q))[^\"'\n]{3,}?(?=(?P=q))")),
    ("secret assignment", re.compile(
        r"(?i)(?P<keep>\b" + _NAME + r"[\"']?\s*[:=]\s*)"
        r"(?![\"'\[])(?=[^\s\"',;}&)\]]*\d)[^\s\"',;}&)\]]{6,}")),
]


def _replace(match: re.Match[str]) -> str:
    keep = match.groupdict().get("keep") or ""
    if match.re is PATTERNS[0][1]:
        kind = match.group("kind") or ""
        return f"{keep}\n{REDACTED}\n-----END {kind}PRIVATE KEY-----"
    return keep + REDACTED


def mask_secrets(text: str) -> str:
    """`text` with obvious secrets replaced by [REDACTED]; applying it twice changes nothing more."""
    if not text:
        return text
    for _label, pattern in PATTERNS:
        text = pattern.sub(_replace, text)
    return text
