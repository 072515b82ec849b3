"""The benign corpus: everyday commands a personal assistant runs in its workspace.

Used by tests/security/test_benign_exec.py (which checks that at most 2% need approval or fail
under the default policy) and by scripts/bench_confinement.py --corpus (its wall time).
Commands run in order in one workspace prepared by `prepare`; a command that names a program
missing on this machine is left out (see `runnable`).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

FILES = {
    "notes.md": "# Notes\n\nTODO: call the plumber\nMeeting on Friday.\n\nIdeas for the garden.\n",
    "todo.txt": "# my list\nTODO buy milk\nTODO renew passport\nwater plants\n",
    "data.csv": "name,age,city\nana,34,Lisbon\nbo,28,Oslo\ncy,45,Lima\ndee,31,Oslo\n",
    "data.json": '{"items": [{"name": "tea", "qty": 2}, {"name": "bread", "qty": 1}], "owner": "me"}\n',
    "logs/app.log": "INFO start\nWARN disk 80%\nERROR timeout talking to db\nINFO stop\n",
    "scripts/hello.py": "#!/usr/bin/env python3\nprint('hello from a script')\n",
    "scripts/stats.py": (
        "import csv, sys, statistics\n"
        "rows = list(csv.DictReader(open(sys.argv[1])))\n"
        "print('mean age', statistics.mean(int(r['age']) for r in rows))\n"
    ),
    "src/app.py": "from util import add\n\n\ndef main():\n    return add(2, 3)\n",
    "src/util.py": "def add(a, b):\n    return a + b\n",
    "tests/test_util.py": (
        "import sys\nsys.path.insert(0, 'src')\nfrom util import add\nassert add(1, 2) == 3\nprint('ok')\n"
    ),
    "Makefile": (
        "build:\n\tmkdir -p dist && cp src/*.py dist/\n\n"
        "test:\n\tpython3 tests/test_util.py\n\n"
        "clean:\n\trm -rf dist\n\n.PHONY: build test clean\n"
    ),
}
WHEEL = "wheels/mypkg-0.1.0-py3-none-any.whl"

COMMANDS = [
    # git
    # a repository's config is read-only inside exec once it exists: identity set as the repository is made
    "git init -q && git config user.email me@example.com && git config user.name Me",
    "git config user.email",
    "git config --get user.name",
    "git add -A",
    "git commit -qm init",
    "git status",
    "git status --short",
    "git log --oneline",
    "git log -1 --stat",
    "git diff",
    "echo more >> notes.md && git diff --stat",
    "git add notes.md && git commit -qm 'update notes'",
    "git branch feature",
    "git checkout -q feature",
    "git checkout -q -",
    "git tag v0.1",
    "git show --stat HEAD",
    "git log --author=Me --oneline",
    "git blame notes.md | head -3",
    "git stash list",
    "git rev-parse HEAD",
    "git diff HEAD~1 --name-only",
    "git grep -n TODO",
    "git ls-files | wc -l",
    "git shortlog -sn HEAD",
    # python
    "python3 --version",
    "python3 scripts/hello.py",
    "python3 scripts/stats.py data.csv",
    "python3 -c 'print(sum(range(100)))'",
    "python3 -c \"import json; print(json.load(open('data.json'))['items'][0])\"",
    "python3 -m json.tool data.json",
    "python3 tests/test_util.py",
    "python3 -m py_compile src/app.py",
    "python3 -c \"import sqlite3; c = sqlite3.connect('db.sqlite'); c.execute('create table t(x)'); c.commit()\"",
    "python3 -c \"import csv; print(len(list(csv.reader(open('data.csv')))))\"",
    "python3 -c 'import os; print(os.getcwd())'",
    "python3 -c 'import tempfile; f = tempfile.NamedTemporaryFile(); print(f.name)'",
    "python3 -c 'import platform; print(platform.system())'",
    "python3 -c 'import datetime; print(datetime.date.today())'",
    "python3 -c 'import hashlib; print(hashlib.sha256(b\"x\").hexdigest())'",
    "python3 -c 'import multiprocessing as m; print(m.cpu_count())'",
    'python3 -c \'import subprocess; print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout)\'',
    "python3 -m venv --without-pip venv-nopip",
    "venv-nopip/bin/python -c 'import sys; print(sys.prefix)'",
    # a venv inside the workspace, pip installing a local package into it (no network needed).
    # Its pip is the system's (--system-site-packages): `python3 -m venv .venv` with a pip of its own
    # spent 7.6 CPU-s of the corpus's ~20 in ensurepip, pip installing its bundled wheel into the
    # venv, which is what the install below does too; `pip --version` and `pip show` are gone with it.
    "python3 -m venv --without-pip --system-site-packages .venv",
    f".venv/bin/python -m pip install -q --no-index --disable-pip-version-check ./{WHEEL}",
    ".venv/bin/python -c 'import mypkg; print(mypkg.VERSION)'",
    ".venv/bin/python -m pip list --local --disable-pip-version-check --format=freeze | head -5",
    # grep, find, sed, awk, jq
    "grep -n TODO notes.md",
    "grep -rn 'def ' src",
    "grep -c , data.csv",
    "grep -i error logs/app.log",
    "grep -v '^#' todo.txt",
    "grep -E '^[A-Z]' notes.md",
    "grep -rl import src",
    "find . -name '*.py' -not -path './.venv/*' -not -path './venv-nopip/*'",
    "find . -type f -newer notes.md -not -path './.git/*' | head -5",
    "find src -name '*.py' | wc -l",
    "find . -maxdepth 1 -type d",
    "find . -size +0 -name '*.md'",
    "sed -n 1,3p data.csv",
    "sed 's/,/;/g' data.csv | head -2",
    "sed -i 's/TODO/DONE/' todo.txt",
    "sed -e '/^$/d' notes.md | wc -l",
    "awk -F, 'NR>1 {s+=$2} END {print s}' data.csv",
    "awk '{print $1}' logs/app.log | sort | uniq -c",
    "awk 'length > 10' notes.md | head -2",
    "awk -F, '{print NF}' data.csv | sort -u",
    "jq '.items | length' data.json",
    "jq -r '.items[].name' data.json",
    "jq '.items[0]' data.json",
    "jq -c '.owner' data.json",
    "jq '.items |= sort_by(.name)' data.json > sorted.json",
    "cut -d, -f1 data.csv",
    "sort -t, -k2 -n data.csv | head -3",
    "sort todo.txt | uniq -c",
    "tr a-z A-Z < notes.md | head -1",
    "paste -d, data.csv data.csv | head -1",
    "comm -12 todo.txt todo.txt | wc -l",
    # looking at files
    "ls",
    "ls -la",
    "ls -R src",
    "ls -lh data.csv",
    "cat notes.md",
    "cat data.csv",
    "head -3 data.csv",
    "head -c 100 notes.md",
    "tail -2 logs/app.log",
    "tail -n +2 data.csv",
    "wc -l data.csv",
    "wc -w notes.md",
    "wc -c data.json",
    "du -sh src",
    "df -h .",
    "stat notes.md",
    "file notes.md",
    "realpath notes.md",
    'basename "$(pwd)"',
    "dirname src/app.py",
    "test -f notes.md && echo yes",
    "[ -d src ] && echo dir",
    "cat -n todo.txt",
    "nl todo.txt",
    "od -c notes.md | head -2",
    "xxd data.json | head -2",
    "md5sum data.csv",
    "sha256sum data.csv",
    "cmp data.csv data.csv",
    # working with files in the workspace
    "mkdir -p build/out",
    "cp data.csv build/",
    "mv build/data.csv build/data2.csv",
    "rm build/data2.csv",
    "touch build/stamp",
    "ln -s ../notes.md build/notes-link",
    "cat build/notes-link",
    "rm -rf build",
    "cp -r src src-backup",
    "rm -r src-backup",
    "chmod +x scripts/hello.py",
    "./scripts/hello.py",
    "echo hello > out.txt",
    "printf 'a\\nb\\n' >> out.txt",
    "tee copy.txt < out.txt",
    "split -l 1 out.txt part- && ls part-*",
    "rm part-*",
    "mktemp",
    "mktemp -d",
    'echo tmp > "$TMPDIR/t.txt" && cat "$TMPDIR/t.txt"',
    "echo scratch > /tmp/scratch.txt && cat /tmp/scratch.txt",
    "mkdir -p a/b/c && rmdir -p a/b/c",
    "ln -sf notes.md latest.md && readlink latest.md",
    "truncate -s 0 copy.txt",
    # make
    "make",
    "make build",
    "make test",
    "make -n build",
    "make clean",
    "make -C . build",
    # tar and zip
    "tar czf src.tgz src",
    "tar tzf src.tgz",
    "mkdir -p x && tar xzf src.tgz -C x && ls x/src",
    "rm -rf x",
    "zip -qr src.zip src",
    "unzip -l src.zip",
    "unzip -qo src.zip -d unz",
    "gzip -k notes.md",
    "gunzip -c notes.md.gz | head -1",
    "rm notes.md.gz",
    # date, environment, the system
    "date",
    "date +%Y-%m-%d",
    "date -u",
    "uname -a",
    "whoami",
    "id -u",
    "hostname",
    'echo "$HOME"',
    'echo "$PATH"',
    "env | grep -c =",
    "pwd",
    "printenv PATH > /dev/null",
    "uptime",
    "nproc",
    "free -m",
    "ps aux | head -3",
    "ps -ef | wc -l",
    "sleep 0.1",
    "true",
    "command -v git",
    "type ls",
    "ulimit -n",
    # text tools
    "echo hello | rev",
    "seq 1 10 | paste -sd+ | bc",
    "echo '2+3' | bc",
    "expr 3 + 4",
    "printf '%s\\n' a b c | sort -r",
    "yes | head -3",
    "seq 5 | shuf -n1 | wc -l",
    "base64 notes.md | head -1",
    "echo aGk= | base64 -d",
    "perl -ne 'print if /DONE/' todo.txt",
    "sqlite3 db2.sqlite 'create table t(x); insert into t values(1); select * from t;'",
    "node -e 'console.log(1 + 1)'",
    "bash -c 'for i in 1 2 3; do echo $i; done'",
    "sh -c 'x=5; echo $((x * 2))'",
    "xargs -n1 echo < todo.txt | head -2",
    "fold -w 10 notes.md | head -2",
    "fmt -w 40 notes.md | head -2",
    "iconv -f utf-8 -t ascii//TRANSLIT notes.md | head -1",
    "envsubst < notes.md | head -1",
]

# Commands that, under the default policy, are expected to need approval or fail (at most 2%):
# each with the reason.
KNOWN_FAILURES: dict[str, str] = {}

# with network allowed (tools.exec.network: true), against a local HTTP server ({url})
NETWORK_COMMANDS = [
    "curl -s {url}",
    "curl -s -o page.html {url} && cat page.html",
    "curl -sI {url} | head -1",
    "wget -q -O- {url}",
    "python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}').read())\"",
]

_OPTIONAL = (
    "git",
    "jq",
    "zip",
    "unzip",
    "sqlite3",
    "node",
    "perl",
    "bc",
    "make",
    "file",
    "xxd",
    "curl",
    "wget",
    "shuf",
    "envsubst",
    "iconv",
    "hostname",
    "free",
    "ps",
    "uptime",
    "gzip",
    "gunzip",
    "tar",
)


def needs(command: str) -> list[str]:
    words = set(re.findall(r"[A-Za-z0-9_.+-]+", command))
    return [tool for tool in _OPTIONAL if tool in words]


def runnable(commands: list[str]) -> list[str]:
    return [c for c in commands if all(shutil.which(t) for t in needs(c))]


def prepare(ws: Path) -> None:
    for rel, text in FILES.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (ws / "memory").mkdir(exist_ok=True)
    (ws / "memory" / "MEMORY.md").write_text("# facts\n")
    os.chmod(ws / "scripts" / "hello.py", 0o644)
    _write_wheel(ws / WHEEL)


def _write_wheel(path: Path) -> None:
    """A tiny pure-Python wheel, so pip installs it with no build tools and no network."""
    import base64
    import hashlib
    import zipfile

    files = {
        "mypkg/__init__.py": 'VERSION = "0.1.0"\n',
        "mypkg-0.1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1.0\n",
        "mypkg-0.1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = (
            base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        )
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("mypkg-0.1.0.dist-info/RECORD,,")
    files["mypkg-0.1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
