"""Typed errors raised inside nanobot; the CLI translates them once, at its edge.

Each error carries the exit code the CLI should use and, where possible, a hint that
tells the user how to fix the problem. Every error class lives here:

* NanobotError                      exit code 1
  + UsageError                      exit code 2: the user asked for something that cannot work
  | + ConfigError
  | | + MissingKeyError
  | | + ContextTooSmallError
  | + SessionInUseError
  | + UnknownSessionError
  | + VersionNotFound               memory restore N
  | + ScheduleError                 cron schedules
  | + JobNotFoundError
  | + StoreBusyError                the jobs file's lock
  + ProviderError                   status, retryable, retry_after, context_overflow, tool_choice_refused
  | + SpendLimitReached             key: a daily token limit (usage.limits.<key>); the call was not sent
  + ToolError                       becomes an error result for the model
  + RequestTooLarge                 a request that could not fit the context window, not sent
  + StorageError                    path, errno (see storage_error)
  | + RecallIndexError              the recall index cannot be used even after building it anew
  + MemoryUpdateRefused             MEMORY.md left unchanged
  + MemoryBusy                      the memory folder's lock
  + RunnerBusyError                 owner: the other cron runner
  + ConsolidationFailure            one failed summarising attempt, retried or archived raw
  + ConsolidationPostponed          consolidation stopped, nothing archived: an outage, or no request fits
  + CallFailed                      an MCP tool call that produced no result
* ValueError (bad file contents, caught where the file is read)
  + SkillError                      a SKILL.md front matter
  + JobFormatError                  jobs.json
  + UnparsableCommand               a shell line the command parser does not know: it needs approval
* OSError
  + LandlockError                   the kernel refused an exec sandbox's Landlock ruleset
  + LauncherUnavailable             no exec launcher can start here: Landlock commands fork in nanobot
* RuntimeError (not subprocess.SubprocessError: the launcher process imports this module, and
  | importing subprocess there would make each fork of it dearer; exec catches both)
  + LauncherError                   the exec launcher could not start one command; it did not run
* TimeoutError
  + LockHeld                        another process holds a file's lock (fsio.ExclusiveLock)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class NanobotError(Exception):
    """Base class: a problem we can explain to the user without a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"


class UsageError(NanobotError):
    """The user asked for something that cannot work as asked (exit code 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """The config file or a setting is invalid or missing."""


class MissingKeyError(ConfigError):
    """No API key is configured for the provider the model needs: `provider` (its config name),
    `env_key` (the variable that would give it), `config` (the file it would go in), `other_key`
    (a sentence naming a provider that does have a key and how to use it, or "")."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        provider: str = "",
        env_key: str = "",
        config: Path | None = None,
        other_key: str = "",
    ) -> None:
        super().__init__(message, hint=hint)
        self.provider, self.env_key, self.config, self.other_key = (
            provider,
            env_key,
            config,
            other_key,
        )


class SessionInUseError(UsageError):
    """Another nanobot process holds the session's lock."""


class ContextTooSmallError(ConfigError):
    """The fixed part of the prompt does not fit the configured context window."""


class ProviderError(NanobotError):
    """The LLM provider failed; `retryable` says whether trying again could help."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        context_overflow: bool = False,
        reported_window: int | None = None,
        reported_tokens: int | None = None,
        tool_choice_refused: bool = False,
        sent: bool = False,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.context_overflow = context_overflow  # the provider said the prompt is too long
        self.reported_window = reported_window  # its real context window, when it said so
        self.reported_tokens = reported_tokens  # its count of our prompt, when it said so
        self.tool_choice_refused = (
            tool_choice_refused  # a 400 saying it cannot force a tool (errors_map)
        )
        self.sent = sent  # it reached the provider before the connection failed: it may be billed


class SpendLimitReached(ProviderError):
    """A daily token limit (usage.limits.<key>) is reached: the call was not sent."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(
            message,
            hint=f"Raise usage.limits.{key} in the config (0: no limit), or wait until midnight.",
        )
        self.key = key


class ToolError(NanobotError):
    """A tool could not do what was asked; becomes an error result for the model."""


class RequestTooLarge(NanobotError):
    """A request could not be brought inside the context window, so it was not sent."""


class StorageError(NanobotError):
    """A file nanobot needs could not be written or read (disk full, read-only, no permission)."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        path: str | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.path = path
        self.errno = errno


class RecallIndexError(StorageError):
    """The recall index (derived data) cannot be opened even after deleting and building it anew."""


class MemoryUpdateRefused(NanobotError):
    """A MEMORY.md update was refused (empty, truncated, or dropping most facts); the file is unchanged."""


class VersionNotFound(UsageError):
    """`restore N` named a version that does not exist."""


class MemoryBusy(NanobotError):
    """Another process kept the memory folder locked for too long."""


class ScheduleError(UsageError):
    """A schedule that cannot work as given (bad expression, unknown zone, time in the past)."""


class JobNotFoundError(UsageError):
    """No job has that id."""


class StoreBusyError(UsageError):
    """Another process held the jobs file's lock for too long."""


class RunnerBusyError(NanobotError):
    """Another runner (a nanobot serve, or a chat firing a job) holds the runner lock."""

    def __init__(
        self, message: str, *, hint: str | None = None, owner: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.owner = owner or {}


class SkillError(ValueError):
    """A SKILL.md whose front matter cannot be used."""


class JobFormatError(ValueError):
    """jobs.json is valid JSON but not a job list we can read."""


class UnparsableCommand(ValueError):
    """A shell command line nanobot/policy/commands.py does not know; no allow rule applies to it."""


class LandlockError(OSError):
    """The kernel refused to set up or apply an exec sandbox's Landlock ruleset."""


class UnknownSessionError(UsageError):
    """No session file exists for the key the user named."""


class ConsolidationFailure(NanobotError):
    """One failed attempt to summarise a chunk; the message says why (kept inside consolidation)."""


class ConsolidationPostponed(NanobotError):
    """Consolidation stopped without archiving anything (the provider is unavailable, or no request
    can fit); the pointer did not move and the next consolidation tries again."""


class CallFailed(NanobotError):
    """A tool call that produced no result: timed out, or the server went away."""


def storage_error(exc: OSError, action: str, path: object = None) -> StorageError:
    """A StorageError for `exc` that names the file and says what to do, e.g. action="save the session"."""
    import errno as _errno

    where = str(path if path is not None else exc.filename or "?")
    reason = exc.strerror or str(exc)
    code = exc.errno
    if code in (_errno.ENOSPC, _errno.EDQUOT):
        hint = "Free some disk space (or raise the quota) on the disk holding that file, then try again."
    elif code == _errno.EROFS:
        hint = "That file system is read-only: remount it writable, or set NANOBOT_HOME to a writable folder."
    elif code in (_errno.EACCES, _errno.EPERM):
        hint = "Make the folder writable for you (check its owner and mode), or set NANOBOT_HOME to one that is."
    else:
        hint = "Check the disk and the folder's permissions, then try again."
    return StorageError(f"could not {action}: {where}: {reason}", hint=hint, path=where, errno=code)


class LauncherUnavailable(OSError):
    """No exec launcher could be started here (no usable interpreter, an import failing under
    -I -S): Landlock commands are forked in nanobot itself instead, as before the launcher."""


class LauncherError(RuntimeError):
    """The exec launcher could not start a command (the message says why); the command did not run."""


class LockHeld(TimeoutError):
    """Another process holds the lock ExclusiveLock.acquire asked for (after its wait, if any).
    Callers turn it into the error their case means (SessionInUseError, MemoryBusy, ...)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"the lock {path} is held by another process")
        self.lock_file = str(path)
