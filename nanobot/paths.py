"""Where nanobot keeps its files. NANOBOT_HOME moves everything under ~/.nanobot."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path


def nanobot_home() -> Path:
    """The root folder (default ~/.nanobot, or $NANOBOT_HOME)."""
    env = os.environ.get("NANOBOT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".nanobot"


PRIVATE_DIR_MODE = 0o700  # the nanobot home and every folder in it: keys, sessions, input history
PRIVATE_FILE_MODE = 0o600


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) as 0700 and tighten it if it already exists."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):  # parents too (mkdir's own parents=True makes them 0755)
        folder.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
    _tighten(path, PRIVATE_DIR_MODE)
    return path


def secure_home(keep_open: Path | None = None) -> None:
    """The nanobot home 0700 with every folder 0700 and file 0600 (homes made by older versions
    were 0755/0644). `keep_open` (the workspace, when it lives inside) is left as the user made it."""
    home = nanobot_home().absolute()
    user_home = Path.home().absolute()
    if home == user_home or home in user_home.parents or home == Path(home.anchor):
        return  # NANOBOT_HOME pointed at a folder that holds far more than nanobot's files
    try:
        was_private = (os.stat(home).st_mode & 0o777) == PRIVATE_DIR_MODE
    except OSError:
        was_private = False
    ensure_private_dir(home)
    skip = Path(keep_open).absolute() if keep_open is not None else None
    for root, dirs, files in os.walk(home):
        here = Path(root)
        dirs[:] = [d for d in dirs if skip is None or (here / d).absolute() != skip]
        for name in dirs:
            _tighten(here / name, PRIVATE_DIR_MODE)
        for name in files:
            _tighten(here / name, PRIVATE_FILE_MODE)
        if was_private:  # tightened before: only the top level, where a hand-made config lands
            dirs[:] = []


def _tighten(path: Path, mode: int) -> None:
    try:
        st = os.lstat(path)
        if (st.st_mode & 0o777) != mode and st.st_uid == os.getuid() and not os.path.islink(path):
            os.chmod(path, mode)
    except OSError:
        pass  # not ours or gone: nothing to tighten


def default_config_path() -> Path:
    return nanobot_home() / "config.json"


def default_workspace() -> Path:
    return nanobot_home() / "workspace"


def sessions_dir() -> Path:
    """Session files live outside the workspace so the agent's file tools cannot clobber them."""
    return nanobot_home() / "sessions"


# An archived conversation (/new keeps the old one whole under this name, beside the live file):
# the file `<live file's stem>.<stamp>.jsonl` (a live file is `<slug>-<12 hex>.jsonl`, so never this),
# named `<key>@<stamp>` for the user, in refs and in the recall index. The stamp is the UTC second
# of the /new, with `-2`, `-3`... when that second already has one; names sort by time.
_STAMP = r"\d{8}T\d{6}Z(?:-[0-9]+)?"
_ARCHIVED_FILE = re.compile(rf"^(.+-[0-9a-f]{{12}})\.({_STAMP})\.jsonl$")
_ARCHIVED_NAME = re.compile(rf"^(.+)@({_STAMP})$", re.DOTALL)


def archived_file_stamp(path: Path | str) -> str | None:
    """The stamp of an archived conversation's file name (None: not one)."""
    m = _ARCHIVED_FILE.match(Path(path).name)
    return m.group(2) if m else None


def archived_file_name(live_file: Path, stamp: str) -> str:
    return f"{live_file.stem}.{stamp}.jsonl"


def archived_name(key: str, stamp: str) -> str:
    """How the user and the recall index name the conversation of `key` archived at `stamp`."""
    return f"{key}@{stamp}"


def archived_at(stamp: str) -> datetime:
    """When /new archived the conversation with this stamp, in local time."""
    return datetime.strptime(stamp[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).astimezone()


def stamp_order(stamp: str) -> tuple[str, int]:
    """An archive stamp's place in time: its second, then its `-N` (so `-10` comes after `-9`)."""
    base, _, n = stamp.partition("-")
    return base, int(n) if n.isdigit() else 1


def split_archived_name(name: str) -> tuple[str, str] | None:
    """(key, stamp) of an archived conversation's name; None when `name` is not one."""
    m = _ARCHIVED_NAME.match(name)
    return (m.group(1), m.group(2)) if m else None


def input_history_path() -> Path:
    return nanobot_home() / "input_history"


def memory_dir(workspace: Path) -> Path:
    return workspace / "memory"


def bundled_dir(name: str) -> Path:
    """A bundled resource folder ("skills" or "workspace").

    In an installed wheel the folders ship as nanobot/_bundled/<name>; in an editable
    install (a git checkout) they are the repo's top-level folders.
    """
    from importlib.resources import files

    packaged = Path(str(files("nanobot"))) / "_bundled" / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / name
