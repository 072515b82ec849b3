"""A shell command line as the list of commands it runs, for allow rules and the accident list.

`parse(line)` returns every command the line would run: each side of `&&`, `||`, `;`, `&`,
pipes and newlines; the bodies of `{ }`, `( )`, if/while/until/for/case and functions; `!`;
command and process substitutions (in words, double quotes, `${...}`, `$((...))`, here-documents
and redirections); and what wrappers run: `nice`/`timeout`/`nohup`/`time`/`stdbuf`/`ionice`/
`setsid`/`command`/`exec`/`builtin`/`busybox` (judged by the command they run), `env` (incl. `-S`),
`sudo`/`doas`, `xargs`, `find -exec/-execdir/-ok/-okdir`, `flock`, `watch`, `sh`/`bash`/... `-c`
strings and `eval`. A wrapper that runs something it names itself (env, sudo, xargs, find, a shell
with -c, eval, flock, watch) is a command of its own as well as the one it runs.

It is strict: what it does not understand raises `UnparsableCommand` (nanobot/errors.py), and
the caller then treats the line as unknown (an allow rule does not apply; it needs approval). A
command whose program or inner string is only known at run time (`$cmd args`, `sh -c "$x"`,
`eval "$y"`, a wrapper with an option we do not know) comes back `opaque`: no allow rule covers it.

Why our own parser: bashlex (PyPI) is GPLv3+ (nanobot is MIT), its last release is from
2023-01, and it raises on `case`, `[[ ]]`, `time` and `coproc`; tree-sitter-bash is tolerant by
design (it recovers from errors), where this needs to refuse what it does not know. The grammar
here is POSIX sh plus the bash forms people type (`[[ ]]`, `<( )`, `$'...'`, `|&`, `&>`), about
what dash (Debian's /bin/sh, which runs exec's commands) and bash accept.

This decides when to ask, never what a command can reach: the OS sandbox holds whatever a
command turns out to do (nanobot/sandbox).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from nanobot.errors import UnparsableCommand as Unparsable

__all__ = ["Command", "Word", "parse", "unreadable"]

MAX_DEPTH = 32  # nesting of substitutions, groups and wrapper strings; deeper is Unparsable
MAX_LENGTH = 100_000  # characters of one command line


@dataclass(frozen=True)
class Word:
    raw: str  # as written
    value: str | None  # after quote removal; None when it depends on run time (an expansion)

    @property
    def text(self) -> str:
        return self.value if self.value is not None else self.raw


@dataclass(frozen=True)
class Command:
    """One simple command: what allow rules and the accident list judge."""

    assignments: tuple[Word, ...]  # NAME=value words before the program
    words: tuple[Word, ...]  # the program and its arguments
    opaque: bool = False  # what it runs is decided at run time: no allow rule applies

    @property
    def text(self) -> str:
        """What allow / ask / deny patterns are searched in: the words as written, one space apart."""
        return " ".join(w.raw for w in (*self.assignments, *self.words))

    @property
    def argv(self) -> list[str]:
        return [w.text for w in self.words]


_METACHARS = frozenset(" \t\n;&|()<>")
_RESERVED = frozenset(
    {
        "if",
        "then",
        "elif",
        "else",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "for",
        "in",
        "case",
        "esac",
        "{",
        "}",
        "!",
        "function",
        "select",
        "coproc",
        "[[",
        "]]",
        "time",
    }
)
_REDIRECT = re.compile(r"(?:\d+|\{[A-Za-z_]\w*\})?(?:&>>|&>|<<<|<<-|<<|<>|<&|>&|>>|>\||<|>)")
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(?:\[[^\]]*\])?\+?=")
_NAME = re.compile(r"[A-Za-z_]\w*")
_SPECIAL_PARAM = frozenset("@*#?-$!0123456789")


class _Parser:
    def __init__(self, text: str, depth: int = 0) -> None:
        if len(text) > MAX_LENGTH:
            raise Unparsable(f"longer than {MAX_LENGTH:,} characters")
        self.s = text
        self.i = 0
        self.depth = depth
        self.out: list[Command] = []
        self.heredocs: list[
            tuple[str, bool, bool]
        ] = []  # (delimiter, strip tabs, quoted) awaiting a newline

    # --- characters -------------------------------------------------------------------
    def _peek(self, n: int = 0) -> str:
        j = self.i + n
        return self.s[j] if j < len(self.s) else ""

    def _at(self, token: str) -> bool:
        return self.s.startswith(token, self.i)

    def _fail(self, why: str) -> Unparsable:
        return Unparsable(f"{why} at character {self.i + 1}")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self._fail(f"nested more than {MAX_DEPTH} levels deep")

    def _blanks(self) -> None:
        """Spaces, tabs, line continuations and a comment (up to, not including, the newline)."""
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and self._peek(1) == "\n":
                self.i += 2
            elif c == "#":
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            else:
                return

    def _newline(self) -> None:
        """Consume a newline and read the here-documents that were waiting for it."""
        self.i += 1
        pending, self.heredocs = self.heredocs, []
        for delimiter, strip, quoted in pending:
            lines: list[str] = []
            while self.i < len(self.s):
                end = self.s.find("\n", self.i)
                end = len(self.s) if end < 0 else end
                line = self.s[self.i : end]
                self.i = min(end + 1, len(self.s))
                if (line.lstrip("\t") if strip else line) == delimiter:
                    break
                lines.append(line)
            if not quoted:  # its $(...) and `...` run
                body = _Parser("\n".join(lines), self.depth + 1)
                body._double_quoted(end=None)
                self.out.extend(body.out)

    def _linebreaks(self) -> None:
        while True:
            self._blanks()
            if self._peek() == "\n":
                self._newline()
            else:
                return

    # --- words ------------------------------------------------------------------------
    def _keyword(self) -> str | None:
        """The reserved word at this position (in command position), without consuming it."""
        for word in ("[[", "{", "}", "!"):
            if self._at(word) and (
                self._peek(len(word)) in _METACHARS or self._peek(len(word)) == ""
            ):
                return word
        m = _NAME.match(self.s, self.i)
        if m and m.group() in _RESERVED:
            after = self._peek(len(m.group()))
            if after == "" or after in _METACHARS:
                return m.group()
        return None

    def _word(self) -> Word | None:
        start = self.i
        value: list[str] = []
        dynamic = False
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in "<>" and self._peek(1) == "(" and self.i == start:  # process substitution
                self.i += 2
                self._subshell_until_paren()
                dynamic = True
                continue
            if c in _METACHARS:
                break
            if c == "\\":
                nxt = self._peek(1)
                self.i += 2
                if nxt != "\n":
                    value.append(nxt)
            elif c == "'":
                end = self.s.find("'", self.i + 1)
                if end < 0:
                    raise self._fail("unterminated single quote")
                value.append(self.s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self.i += 1
                known = self._double_quoted(end='"')
                dynamic = dynamic or known is None
                value.append(known or "")
            elif c == "$":
                expanded = self._dollar()
                if expanded is None:
                    dynamic = True
                else:
                    value.append(expanded)
            elif c == "`":
                self._backtick()
                dynamic = True
            else:
                value.append(c)
                self.i += 1
        if self.i == start:
            return None
        return Word(self.s[start : self.i], None if dynamic else "".join(value))

    def _double_quoted(self, end: str | None) -> str | None:
        """The inside of "..." (or of an unquoted here-document when `end` is None); its value, or None."""
        value: list[str] = []
        dynamic = False
        while True:
            if self.i >= len(self.s):
                if end is None:
                    break
                raise self._fail("unterminated double quote")
            c = self.s[self.i]
            if c == end:
                self.i += 1
                break
            if c == "\\":
                nxt = self._peek(1)
                self.i += 2
                if nxt in ('"', "\\", "$", "`") if end else nxt in ("\\", "$", "`"):
                    value.append(nxt)
                elif nxt != "\n":
                    value.append("\\" + nxt)
            elif c == "$":
                expanded = self._dollar(quoted=True)
                if expanded is None:
                    dynamic = True
                else:
                    value.append(expanded)
            elif c == "`":
                self._backtick()
                dynamic = True
            else:
                value.append(c)
                self.i += 1
        return None if dynamic else "".join(value)

    def _dollar(self, quoted: bool = False) -> str | None:
        """At a `$`: consume the expansion (parsing what it runs); None when it is one, else the text."""
        nxt = self._peek(1)
        if self._at("$(("):
            self.i += 3
            self._arithmetic()
            return None
        if nxt == "(":
            self.i += 2
            self._subshell_until_paren()
            return None
        if nxt == "{":
            self.i += 2
            self._braced_parameter()
            return None
        if nxt == "'" and not quoted:  # bash's $'...': its escapes are not decoded here
            self.i += 2
            while self.i < len(self.s) and self.s[self.i] != "'":
                self.i += 2 if self.s[self.i] == "\\" else 1
            if self.i >= len(self.s):
                raise self._fail("unterminated $'...'")
            self.i += 1
            return None
        if nxt == '"' and not quoted:  # $"...": a translated string, otherwise like "..."
            self.i += 2
            return self._double_quoted(end='"')
        m = _NAME.match(self.s, self.i + 1)
        if m:
            self.i = m.end()
            return None
        if nxt and nxt in _SPECIAL_PARAM:
            self.i += 2
            return None
        self.i += 1
        return "$"

    def _subshell_until_paren(self) -> None:
        self._enter()
        self._list(frozenset({")"}))
        if self._peek() != ")":
            raise self._fail("missing )")
        self.i += 1
        self.depth -= 1

    def _arithmetic(self) -> None:
        """After `$((` or `((`: up to the matching `))`, parsing substitutions inside."""
        self._enter()
        level = 0
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "(":
                level += 1
                self.i += 1
            elif c == ")":
                if level == 0:
                    if self._peek(1) != ")":
                        raise self._fail("arithmetic without ))")
                    self.i += 2
                    self.depth -= 1
                    return
                level -= 1
                self.i += 1
            elif c == "$":
                self._dollar(quoted=True)
            elif c == "`":
                self._backtick()
            elif c == '"':
                self.i += 1
                self._double_quoted(end='"')
            elif c == "'":
                raise self._fail("quote in arithmetic")
            else:
                self.i += 1
        raise self._fail("unterminated arithmetic")

    def _braced_parameter(self) -> None:
        """After `${`: up to the matching `}`, parsing substitutions in the operand."""
        self._enter()
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "}":
                self.i += 1
                self.depth -= 1
                return
            if c == "\\":
                self.i += 2
            elif c == "'":
                end = self.s.find("'", self.i + 1)
                if end < 0:
                    raise self._fail("unterminated single quote")
                self.i = end + 1
            elif c == '"':
                self.i += 1
                self._double_quoted(end='"')
            elif c == "$":
                self._dollar(quoted=True)
            elif c == "`":
                self._backtick()
            else:
                self.i += 1
        raise self._fail("unterminated ${")

    def _backtick(self) -> None:
        start = self.i + 1
        j = start
        inner: list[str] = []
        while j < len(self.s) and self.s[j] != "`":
            if self.s[j] == "\\" and j + 1 < len(self.s) and self.s[j + 1] in "`\\$":
                inner.append(self.s[j + 1])
                j += 2
            else:
                inner.append(self.s[j])
                j += 1
        if j >= len(self.s):
            raise self._fail("unterminated `")
        self.i = j + 1
        self.out.extend(_parse(_join(inner), self.depth + 1))

    # --- grammar ----------------------------------------------------------------------
    def _list(self, ends: frozenset[str]) -> str:
        """Commands up to a reserved word of `ends` (consumed), or `)`, `;;` (not consumed) or the end."""
        while True:
            self._linebreaks()
            if self._peek() == ";" and not self._at(";;") and not self._at(";&"):
                raise self._fail("unexpected ;")
            if self.i >= len(self.s):
                if "" in ends:
                    return ""
                raise self._fail("unexpected end")
            if self._peek() == ")":
                if ")" in ends:
                    return ")"
                raise self._fail("unexpected )")
            if self._at(";;") or self._at(";&"):
                if ";;" in ends:
                    return ";;"
                raise self._fail("unexpected ;;")
            keyword = self._keyword()
            if keyword is not None and keyword in ends:
                self.i += len(keyword)
                return keyword
            self._and_or()
            self._blanks()
            c = self._peek()
            if c == "\n":
                self._newline()
            elif c == "&" and not self._at("&&") and not self._at("&>"):
                self.i += 1
            elif c == ";" and not self._at(";;") and not self._at(";&"):
                self.i += 1
            elif c not in ("", ")") and not self._at(";;") and not self._at(";&"):
                raise self._fail(f"unexpected {c!r}")

    def _and_or(self) -> None:
        self._pipeline()
        while True:
            self._blanks()
            if self._at("&&") or self._at("||"):
                self.i += 2
                self._linebreaks()
                self._pipeline()
            else:
                return

    def _pipeline(self) -> None:
        self._blanks()
        while self._keyword() in ("!", "time"):
            self.i += 1 if self._peek() == "!" else 4
            self._blanks()
            if self._at("-p") and self._peek(2) in (" ", "\t"):
                self.i += 2
                self._blanks()
        self._command()
        while True:
            self._blanks()
            if self._at("|&"):
                self.i += 2
            elif self._peek() == "|" and not self._at("||"):
                self.i += 1
            else:
                return
            self._linebreaks()
            self._command()

    def _command(self) -> None:
        self._blanks()
        self._enter()
        keyword = self._keyword()
        if keyword == "{":
            self.i += 1
            self._list(frozenset({"}"}))
            self._redirections()
        elif self._at("(("):
            self.i += 2
            self._arithmetic()
            self._redirections()
        elif self._peek() == "(":
            self.i += 1
            self._subshell_until_paren()
            self._redirections()
        elif keyword == "if":
            self.i += 2
            self._list(frozenset({"then"}))
            while True:
                end = self._list(frozenset({"elif", "else", "fi"}))
                if end == "fi":
                    break
                if end == "elif":
                    self._list(frozenset({"then"}))
                else:
                    self._list(frozenset({"fi"}))
                    break
            self._redirections()
        elif keyword in ("while", "until"):
            self.i += len(keyword)
            self._list(frozenset({"do"}))
            self._list(frozenset({"done"}))
            self._redirections()
        elif keyword in ("for", "select"):
            self._for(keyword)
        elif keyword == "case":
            self._case()
        elif keyword == "function":
            self.i += len(keyword)
            self._blanks()
            if self._word() is None:
                raise self._fail("function without a name")
            self._blanks()
            if self._at("()"):
                self.i += 2
            self._function_body()
        elif keyword == "[[":
            self._double_bracket()
        elif keyword is not None:
            raise self._fail(f"unexpected {keyword!r}")
        else:
            self._simple()
        self.depth -= 1

    def _function_body(self) -> None:
        self._linebreaks()
        if (
            self._keyword() not in ("{", "if", "while", "until", "for", "case", "[[")
            and self._peek() != "("
        ):
            raise self._fail("function body is not a compound command")
        self._command()

    def _for(self, keyword: str) -> None:
        self.i += len(keyword)
        self._blanks()
        if self._at("(("):
            self.i += 2
            self._arithmetic()
        else:
            name = self._word()
            if name is None or name.value is None:
                raise self._fail(f"{keyword} without a name")
            self._linebreaks()
            if self._keyword() == "in":
                self.i += 2
                while True:
                    self._blanks()
                    if self._peek() in ("", "\n", ";"):
                        break
                    if self._word() is None:
                        raise self._fail(f"unexpected {self._peek()!r} in {keyword}")
        self._blanks()
        if self._peek() == ";":
            self.i += 1
        self._linebreaks()
        if self._keyword() == "do":
            self.i += 2
            self._list(frozenset({"done"}))
        elif self._keyword() == "{":
            self.i += 1
            self._list(frozenset({"}"}))
        else:
            raise self._fail(f"{keyword} without do")
        self._redirections()

    def _case(self) -> None:
        self.i += 4
        self._blanks()
        if self._word() is None:
            raise self._fail("case without a word")
        self._linebreaks()
        if self._keyword() != "in":
            raise self._fail("case without in")
        self.i += 2
        while True:
            self._linebreaks()
            if self._keyword() == "esac":
                self.i += 4
                break
            if self._peek() == "(":
                self.i += 1
            while True:  # patterns
                self._blanks()
                if self._word() is None:
                    raise self._fail("case pattern expected")
                self._blanks()
                if self._peek() == "|":
                    self.i += 1
                    continue
                if self._peek() != ")":
                    raise self._fail("case pattern without )")
                self.i += 1
                break
            end = self._list(frozenset({"esac", ";;"}))
            if end == "esac":
                break
            for term in (";;&", ";;", ";&"):
                if self._at(term):
                    self.i += len(term)
                    break
        self._redirections()

    def _double_bracket(self) -> None:
        """bash's [[ ... ]]: words up to ]], where && || ( ) < > are operators of the test."""
        self.i += 2
        while True:
            self._linebreaks()
            if self._at("]]") and self._peek(2) in ("", *_METACHARS):
                self.i += 2
                break
            if self.i >= len(self.s):
                raise self._fail("[[ without ]]")
            for op in ("&&", "||", "(", ")", "<", ">", "!"):
                if self._at(op):
                    self.i += len(op)
                    break
            else:
                if self._word() is None:
                    raise self._fail(f"unexpected {self._peek()!r} in [[ ]]")
        self._redirections()

    def _redirection(self) -> bool:
        m = _REDIRECT.match(self.s, self.i)
        if m is None or (m.group() in ("<", ">") and self._peek(1) == "("):  # <(...) is a word
            return False
        op = m.group().lstrip("0123456789")
        if op.startswith("{"):
            op = op[op.index("}") + 1 :]
        self.i = m.end()
        self._blanks()
        target = self._word()
        if target is None:
            raise self._fail(f"redirection {op} without a target")
        if op in ("<<", "<<-"):
            quoted = any(q in target.raw for q in "'\"\\")
            delimiter = re.sub(r"[\"'\\]", "", target.raw)
            self.heredocs.append((delimiter, op == "<<-", quoted))
        return True

    def _redirections(self) -> None:
        while True:
            self._blanks()
            if not self._redirection():
                return

    def _simple(self) -> None:
        assignments: list[Word] = []
        words: list[Word] = []
        while True:
            self._blanks()
            if self.i >= len(self.s):
                break
            if self._redirection():
                continue
            if self._peek() == "(" and words and not assignments and len(words) == 1:
                self._blanks()
                if not self.s.startswith("()", self.i) and not re.match(
                    r"\(\s*\)", self.s[self.i :]
                ):
                    raise self._fail("unexpected (")
                self.i = self.s.index(")", self.i) + 1
                self._function_body()  # name() compound: its body's commands run when it is called
                return
            word = self._word()
            if word is None:
                break
            if not words and _ASSIGNMENT.match(word.raw):
                if self._peek() == "(":
                    raise self._fail("array assignment")
                assignments.append(word)
            else:
                words.append(word)
        if not words and not assignments:
            raise self._fail(
                f"expected a command, found {self._peek()!r}"
                if self._peek()
                else "expected a command"
            )
        self.out.append(
            Command(tuple(assignments), tuple(words), opaque=bool(words) and words[0].value is None)
        )


def _join(chars: list[str]) -> str:
    return "".join(chars)


def _parse(text: str, depth: int) -> list[Command]:
    parser = _Parser(text, depth)
    if parser.depth > MAX_DEPTH:
        raise Unparsable(f"nested more than {MAX_DEPTH} levels deep")
    parser._list(frozenset({""}))
    if parser.heredocs:  # a here-document at the very end: its body is empty
        parser.heredocs = []
    return parser.out


# --- what wrappers run ------------------------------------------------------------------

# name -> (options that take a value, options without one); a wrapper judged only by what it runs
_TRANSPARENT: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "nice": (frozenset({"-n", "--adjustment"}), frozenset()),
    "nohup": (frozenset(), frozenset()),
    "time": (
        frozenset({"-f", "--format", "-o", "--output"}),
        frozenset({"-p", "-a", "-v", "--portability"}),
    ),
    "timeout": (
        frozenset({"-s", "--signal", "-k", "--kill-after"}),
        frozenset({"--preserve-status", "--foreground", "-v", "--verbose"}),
    ),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), frozenset()),
    "ionice": (frozenset({"-c", "-n", "--class", "--classdata"}), frozenset({"-t", "--ignore"})),
    "setsid": (frozenset(), frozenset({"-f", "-w", "-c", "--fork", "--wait", "--ctty"})),
    "command": (frozenset(), frozenset({"-p"})),
    "exec": (frozenset({"-a"}), frozenset({"-c", "-l"})),
    "builtin": (frozenset(), frozenset()),
    "busybox": (frozenset(), frozenset()),
}
# wrappers that are a command of their own too
_SUDO = (
    frozenset({"-u", "-g", "-U", "-C", "-h", "-p", "-D", "-r", "-t", "-T", "--user", "--group"}),
    frozenset({"-E", "-H", "-n", "-S", "-k", "-b", "-P", "-A", "-i", "-s", "--"}),
)
_XARGS = (
    frozenset(
        {
            "-a",
            "-d",
            "-E",
            "-I",
            "-L",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--max-lines",
            "--replace",
        }
    ),
    frozenset(
        {
            "-0",
            "-e",
            "-i",
            "-l",
            "-p",
            "-r",
            "-t",
            "-x",
            "--null",
            "--no-run-if-empty",
            "--verbose",
            "--interactive",
            "--exit",
            "--open-tty",
            "-o",
        }
    ),
)
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "fish"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_MAX_WRAPS = 8


def _skip_options(
    args: list[Word], with_value: frozenset[str], flags: frozenset[str], *, numeric: bool = False
) -> int | None:
    """The index of the first operand after the options, or None when an option is unknown."""
    i = 0
    while i < len(args):
        a = args[i].value
        if a is None:
            return None
        if a == "--":
            return i + 1
        if not a.startswith("-") or a == "-":
            return i
        name = a.split("=", 1)[0]
        if name in flags or (numeric and a[1:].lstrip("-").isdigit()):
            i += 1
        elif name in with_value:
            i += 1 if "=" in a else 2
        elif a[:2] in with_value and len(a) > 2 and not a.startswith("--"):  # -n5, -oL
            i += 1
        else:
            return None
    return i


def _inner(words: list[Word]) -> Command:
    return Command((), tuple(words), opaque=bool(words) and words[0].value is None)


def _opaque(cmd: Command) -> list[Command]:
    return [Command(cmd.assignments, cmd.words, opaque=True)]


def _from_string(cmd: Command, word: Word | None, depth: int) -> list[Command]:
    """A wrapper that runs a string as a shell line: itself, and the commands of the string."""
    if word is None or word.value is None:
        return _opaque(cmd)
    return [cmd, *_expand(_parse(word.value, depth + 1), depth + 1)]


def _unwrap(cmd: Command, depth: int) -> list[Command]:
    """`cmd` and the commands it runs through wrappers, judged each on its own."""
    if cmd.opaque or not cmd.words:
        return [cmd]
    if depth > _MAX_WRAPS:
        return _opaque(cmd)
    name = cmd.words[0].value or ""
    base = name.rsplit("/", 1)[-1]
    args = list(cmd.words[1:])
    if base in _TRANSPARENT:
        if base == "command" and any(a.value in ("-v", "-V") for a in args[:2]):
            return [cmd]  # `command -v x` only looks x up
        if base == "busybox" and args and (args[0].value or "").startswith("-"):
            return [cmd]
        with_value, flags = _TRANSPARENT[base]
        at = _skip_options(args, with_value, flags, numeric=base == "nice")
        if at is None:
            return _opaque(cmd)
        if base == "timeout":
            at += 1  # the duration
        if at >= len(args):
            return [cmd]
        return _unwrap(_inner(args[at:]), depth + 1)
    if base == "env":
        return _env(cmd, args, depth)
    if base in ("sudo", "doas"):
        at = _skip_options(args, *_SUDO)
        if at is None:
            return _opaque(cmd)
        return [cmd, *(_unwrap(_inner(args[at:]), depth + 1) if at < len(args) else [])]
    if base == "xargs":
        at = _skip_options(args, *_XARGS)
        if at is None:
            return _opaque(cmd)
        inner = args[at:] or [Word("echo", "echo")]
        return [cmd, *_unwrap(_inner(inner), depth + 1)]
    if base == "find":
        return _find(cmd, args, depth)
    if base in _SHELLS or (base == "busybox" and args and args[0].value in _SHELLS):
        return _shell(cmd, args[1:] if base == "busybox" else args, depth)
    if base == "eval":
        if any(a.value is None for a in args):
            return _opaque(cmd)
        return _from_string(
            cmd, Word(" ".join(a.raw for a in args), " ".join(a.text for a in args)), depth
        )
    if base == "flock":
        return _flock(cmd, args, depth)
    if base == "watch":
        at = _skip_options(
            args,
            frozenset({"-n", "--interval", "-d", "-q"}),
            frozenset({"-t", "-b", "-e", "-g", "-c", "-x", "-p", "--exec", "--differences"}),
        )
        if at is None or at >= len(args) or any(a.value is None for a in args[at:]):
            return _opaque(cmd)
        return _from_string(cmd, Word("", " ".join(a.text for a in args[at:])), depth)
    return [cmd]


def _env(cmd: Command, args: list[Word], depth: int) -> list[Command]:
    i = 0
    while i < len(args):
        a = args[i].value
        if a is None:
            return _opaque(cmd)
        if a in ("-i", "-0", "--ignore-environment", "--null", "-", "-v", "--debug"):
            i += 1
        elif a in ("-u", "--unset", "-C", "--chdir"):
            i += 2
        elif a.startswith(("--unset=", "--chdir=")) or (a[:2] in ("-u", "-C") and len(a) > 2):
            i += 1
        elif a in ("-S", "--split-string") or a.startswith(("-S", "--split-string=")):
            if a in ("-S", "--split-string"):
                string = args[i + 1] if i + 1 < len(args) else None
                rest = args[i + 2 :]
            else:
                text = a.split("=", 1)[1] if a.startswith("--") else a[2:]
                string, rest = Word(text, text), args[i + 1 :]
            if string is None or string.value is None or any(r.value is None for r in rest):
                return _opaque(cmd)
            line = " ".join([string.value, *(r.raw for r in rest)])
            return _from_string(cmd, Word(line, line), depth)
        elif a == "--":
            i += 1
            break
        elif a.startswith("-"):
            return _opaque(cmd)
        elif _ASSIGNMENT.match(a):
            i += 1
        else:
            break
    if i >= len(args):
        return [cmd]
    return [cmd, *_unwrap(_inner(args[i:]), depth + 1)]


def _find(cmd: Command, args: list[Word], depth: int) -> list[Command]:
    out = [cmd]
    i = 0
    while i < len(args):
        if args[i].value in _FIND_EXEC:
            j = i + 1
            while j < len(args) and args[j].value not in (";", "+"):
                j += 1
            if j == i + 1:
                return _opaque(cmd)
            out.extend(_unwrap(_inner(args[i + 1 : j]), depth + 1))
            i = j
        i += 1
    return out


def _shell(cmd: Command, args: list[Word], depth: int) -> list[Command]:
    """sh [options] -c STRING [name args...]: the string's commands; without -c, the shell itself."""
    has_c = False
    for i, a in enumerate(args):
        v = a.value
        if v is None:
            return _opaque(cmd)
        if v == "--" or not v.startswith(("-", "+")) or v in ("-", "+"):
            operand = i + (v == "--")
            if has_c:
                return _from_string(cmd, args[operand] if operand < len(args) else None, depth)
            return [cmd]
        if v.startswith("--"):
            continue  # --norc, --login, ...
        if "c" in v[1:]:
            has_c = True
        if "o" in v[1:] or "O" in v[1:]:  # -o NAME takes a value
            return _opaque(cmd)
    return _opaque(cmd) if has_c else [cmd]


def _flock(cmd: Command, args: list[Word], depth: int) -> list[Command]:
    for i, a in enumerate(args):
        if a.value in ("-c", "--command"):
            return _from_string(cmd, args[i + 1] if i + 1 < len(args) else None, depth)
    at = _skip_options(
        args,
        frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}),
        frozenset(
            {
                "-s",
                "-x",
                "-e",
                "-n",
                "-u",
                "-o",
                "--shared",
                "--exclusive",
                "--nonblock",
                "--unlock",
                "--close",
                "--verbose",
                "-F",
                "--no-fork",
            }
        ),
    )
    if at is None:
        return _opaque(cmd)
    if at + 1 >= len(args):
        return [cmd]
    return [cmd, *_unwrap(_inner(args[at + 1 :]), depth + 1)]


def _expand(commands: list[Command], depth: int) -> list[Command]:
    out: list[Command] = []
    for cmd in commands:
        out.extend(_unwrap(cmd, depth))
    return out


def parse(line: str) -> list[Command]:
    """Every command `line` runs, nested and wrapped ones included; raises UnparsableCommand."""
    return list(_parsed(line))


@lru_cache(
    maxsize=64
)  # exec asks deny, allow and ask rules and the accident list about the same line
def _parsed(line: str) -> tuple[Command, ...]:
    return tuple(_expand(_parse(line, 0), 0))


def unreadable(line: str) -> str | None:
    """Why the parser cannot read `line` ("unterminated double quote at character 19"), or None when it can."""
    try:
        _parsed(line)
    except Unparsable as exc:
        return str(exc)
    return None
