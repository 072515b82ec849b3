"""What a confined command may see and do: one pure description both mechanisms obey.

The rules (numbered so the mechanisms and the README can point at them):
1. The workspace is writable; so is a private tmp (a fresh one per command).
2. The protected paths of the workspace are read-only (the table in nanobot.policy.protected:
   memory/, cron/, skills/, the prompt files, every git repository's hooks and settings, .envrc, editor
   run configurations, shell start-up files): changes to them go through their doors, which ask.
3. Invisible: the nanobot home (config, sessions, locks, input history), the credential
   stores, every home folder (HOME, /root, /home) and per-user runtime folders (agent sockets),
   except the workspace itself, even when the workspace lies inside one of them; and the host's
   secret files in /etc (HOST_SECRETS: /etc/shadow, SSH host keys, ...), restricted mode included.
4. Outside the workspace everything else is read-only; with restrictToWorkspace only the
   system folders are visible at all.
5. No network unless the command was allowed it; then, where the kernel can enforce it, TCP only to
   nanobot's egress proxy (`proxy_port`), which asks per domain (tools/egress_proxy.py).
6. Limits on processes, file size and memory (see Limits).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

# Relative to HOME. All of HOME is hidden anyway; these are listed again so they stay hidden
# when the workspace is HOME itself (or an ancestor of them).
CREDENTIAL_STORES = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".azure",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    # browser profiles
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".config/vivaldi",
    ".config/opera",
    "snap/firefox",
    ".var/app",
)

# Read-only, always visible: what commands need to run at all.
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/var/lib/dpkg",
    "/var/lib/apt",
    "/run/systemd/resolve",  # the last: where /etc/resolv.conf may point
)

# Language toolchains people install in HOME (pyenv, rustup, nvm, ...): shown read-only, so the
# interpreters keep working although the rest of HOME is hidden. The running Python's own
# installation and the folders on PATH are added to these wherever they live.
TOOLCHAINS = (
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".local/share/uv/python",
    ".cargo/bin",
    ".rustup",
    ".nvm",
    ".volta",
    ".bun/bin",
    ".deno/bin",
    "go/bin",
    ".asdf",
    ".local/share/mise",
    ".sdkman/candidates",
)

# Shared or per-user folders never shown (a private tmp replaces /tmp).
_ALWAYS_HIDDEN = ("/root", "/home", "/run/user", "/var/run/user", "/tmp", "/var/tmp")

# The host's own secrets inside the system folders (rule 3): password hashes, sudo rules, the SSH
# server's private keys, TLS private keys. Root may read them, and commands may run as root; hidden
# one by one, the rest of /etc stays readable (Landlock grants /etc's other entries, see beneath_except).
HOST_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
)
HOST_SECRET_GLOBS = ("/etc/ssh/ssh_host_*_key",)


def host_secrets() -> list[Path]:
    """HOST_SECRETS and the files HOST_SECRET_GLOBS match here (existing or not: hiding skips the missing)."""
    import glob

    return [Path(p) for p in HOST_SECRETS] + [
        Path(p) for g in HOST_SECRET_GLOBS for p in sorted(glob.glob(g))
    ]


@dataclass(frozen=True)
class Limits:
    """Per-command resource limits (rule 6)."""

    processes: int = 512  # tasks alive at once in the command's tree: a fork bomb stops here
    file_size: int = 1 << 30  # bytes one file may grow to (`yes > file` stops at 1 GiB)
    memory: int = 4 << 30  # bytes: the whole tree (cgroup) or each process's data (rlimit)
    tmp_size: int = 512 << 20  # bytes of the private tmp when it is a tmpfs (bubblewrap)


@dataclass(frozen=True)
class Policy:
    workspace: Path  # resolved
    read_only: tuple[Path, ...]  # inside the workspace (rule 2)
    hidden: tuple[Path, ...]  # rule 3, resolved, existing or not
    restrict: bool  # rule 4: only system folders outside the workspace
    network: bool  # rule 5
    limits: Limits = field(default_factory=Limits)
    extra_read: tuple[
        Path, ...
    ] = ()  # e.g. a working_dir outside the workspace (never when restrict)
    toolchains: tuple[Path, ...] = ()  # read-only although inside a hidden folder (see TOOLCHAINS)
    proxy_port: int = (
        0  # rule 5: with network, TCP connect only to this port (nanobot's egress proxy); 0: any
    )

    def system_dirs(self) -> list[Path]:
        return [Path(p) for p in SYSTEM_DIRS if os.path.exists(p)]

    def hidden_in_system_dirs(self) -> list[Path]:
        """Hidden paths inside the system folders restricted mode shows (the host's secrets)."""
        dirs = self.system_dirs()
        return [h for h in self.hidden if any(h != d and h.is_relative_to(d) for d in dirs)]

    def hidden_inside_workspace(self) -> list[Path]:
        return list(_split_hidden(self.hidden, self.workspace)[0])

    def hidden_outside_workspace(self) -> tuple[Path, ...]:
        return _split_hidden(self.hidden, self.workspace)[1]

    def is_hidden(self, path: Path) -> bool:
        """Whether `path` falls in a hidden area and not back inside the workspace."""
        path = path.resolve()
        if path.is_relative_to(self.workspace):
            return any(path.is_relative_to(h) for h in self.hidden_inside_workspace())
        return any(path.is_relative_to(h) for h in self.hidden)


@lru_cache(maxsize=32)
def _split_hidden(
    hidden: tuple[Path, ...], workspace: Path
) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(inside the workspace, not inside it): the same for every command of a session."""
    inside = tuple(h for h in hidden if h != workspace and h.is_relative_to(workspace))
    return inside, tuple(h for h in hidden if not h.is_relative_to(workspace))


def _resolved(p: Path) -> Path:
    try:
        return p.expanduser().resolve()
    except (OSError, RuntimeError):
        return p.expanduser().absolute()


def build_policy(
    workspace: Path,
    read_only: tuple[Path, ...] = (),
    *,
    restrict: bool,
    network: bool,
    limits: Limits | None = None,
    nanobot_home: Path | None = None,
    home: Path | None = None,
) -> Policy:
    """The policy for one command in `workspace` (rules 1-6); `read_only`: the protected paths
    (nanobot.policy.protected.exec_read_only, which exec passes)."""
    from nanobot import paths

    ws = _resolved(workspace)
    home = _resolved(home or Path(os.path.expanduser("~")))
    nb_home = _resolved(nanobot_home or paths.nanobot_home())
    hidden, shown = _areas(home, nb_home, os.environ.get("PATH", ""), restrict)
    return Policy(
        workspace=ws,
        read_only=tuple(read_only),
        hidden=hidden,
        restrict=restrict,
        network=network,
        limits=limits or Limits(),
        toolchains=shown,
    )


@lru_cache(maxsize=32)
def _areas(
    home: Path, nb_home: Path, path_env: str, restrict: bool
) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(hidden, shown read-only inside hidden areas); the same for every command of a session."""
    hidden = [
        home,
        nb_home,
        *(home / c for c in CREDENTIAL_STORES),
        *(Path(p) for p in _ALWAYS_HIDDEN),
        *host_secrets(),
    ]
    unique = tuple(dict.fromkeys(h for h in (_resolved(h) for h in hidden) if h != Path("/")))
    # toolchains, the running Python, and the folders on PATH (so ~/bin and pyenv shims work),
    # unless one of them would show a credential store or the nanobot home
    secret = [home, nb_home, *(_resolved(home / c) for c in CREDENTIAL_STORES)]
    path_dirs = [Path(p) for p in path_env.split(os.pathsep) if os.path.isabs(p)]
    # a version manager's shims folder (pyenv, rbenv, ...) runs the manager itself from its root
    path_dirs += [p.parent for p in path_dirs if p.name == "shims"]
    tools = [home / t for t in TOOLCHAINS] + [Path(sys.base_prefix), Path(sys.prefix)] + path_dirs
    tools = [_resolved(t) for t in tools if t.is_dir()]

    def reveals_a_secret(
        t: Path,
    ) -> bool:  # inside a credential store or the nanobot home, or above one
        return any((t.is_relative_to(c) and c != home) or c.is_relative_to(t) for c in secret)

    shown = tuple(
        dict.fromkeys(
            t
            for t in tools
            if (restrict or any(t.is_relative_to(h) for h in unique)) and not reveals_a_secret(t)
        )
    )
    return unique, shown


HARD_LINK_SCAN = 20_000  # entries of the workspace looked at for hard links, once per session


def hard_links(workspace: Path, limit: int = HARD_LINK_SCAN) -> tuple[tuple[Path, ...], bool]:
    """Files in `workspace` with more than one hard link (the other may be outside it, where a write
    through this one would land), and whether the walk saw the whole workspace (`limit` entries)."""
    found: list[Path] = []
    seen = 0
    stack = [workspace]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return tuple(found), False
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif (
                    entry.is_file(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_nlink > 1
                ):
                    found.append(Path(entry.path))
            except OSError:
                continue
    return tuple(found), True


def beneath_except(root: Path, excluded: list[Path]) -> list[Path]:
    """Directories and files that cover `root` minus the `excluded` subtrees.

    Allow-list mechanisms (Landlock) cannot subtract, so a grant on `root` with holes is
    written as grants on the siblings along the path to each hole. `root` itself is not in
    the result when a hole lies beneath it (its direct entries stay unlisted).
    """
    holes = [e for e in excluded if e.is_relative_to(root)]
    if not holes:
        return [root]
    if root in holes:
        return []
    out: list[Path] = []
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    for child in children:
        if child.is_symlink():  # the grant follows the link: never let it lead into a hole
            target = _resolved(child)
            if not any(target.is_relative_to(h) for h in excluded):
                out.extend(beneath_except(target, holes))
            continue
        out.extend(beneath_except(child, holes))
    return out
