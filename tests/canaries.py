"""Canaries for judging exec by its side effects: servers that count connections, files that
must stay unread and unchanged, and a scan for processes that outlived their command."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from nanobot.sandbox import choose

from host_procs import host_pids

MECHANISMS = ["bwrap", "landlock"]
# What a default config picks here ("auto"): the everyday suite proves each guarantee under it, and
# the thorough tier (tests/conftest.py) under the other mechanism too.
AUTO_MECHANISM = choose("auto").mechanism


def by_mechanism(values: list) -> list:
    """One pytest param per value (a mechanism, "landlock-no-mounts", or a tuple that starts with
    one): the mechanism a default config picks here plain, any other marked thorough."""

    def mechanism(value: object) -> str:
        return str(value[0] if isinstance(value, tuple) else value).split("-")[0]

    return [
        pytest.param(v, marks=() if mechanism(v) == AUTO_MECHANISM else pytest.mark.thorough)
        for v in values
    ]


def confinement_or_skip(mechanism: str):
    conf = choose(mechanism)
    if conf.mechanism != mechanism:
        pytest.skip(f"{mechanism} is not available here: {conf.detail}")
    return conf


class CanaryTCP:
    """A TCP server on 127.0.0.1 that counts every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.received = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            conn.settimeout(0.5)
            try:
                self.received += conn.recv(65536)
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\ncanary")
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


class CanaryUDP:
    """A UDP socket on a loopback address that counts every datagram it receives."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.datagrams = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recvfrom(65536)
                self.datagrams += 1
            except (TimeoutError, OSError):
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def kill_marked(marker: str) -> None:
    for pid in host_pids(marker):
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def snapshot(*roots: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """Every file and folder under `roots` (not under `skip`): its mode, and its content hash."""
    out: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            here = Path(dirpath)
            if any(here.is_relative_to(s) for s in skip):
                dirnames[:] = []
                continue
            out[str(here)] = ("dir", os.lstat(here).st_mode)
            for name in filenames:
                p = here / name
                if any(p.is_relative_to(s) for s in skip):
                    continue
                st = os.lstat(p)
                digest = (
                    ""
                    if not p.is_file() or p.is_symlink()
                    else hashlib.sha256(p.read_bytes()).hexdigest()
                )
                out[str(p)] = ("file", st.st_mode, st.st_nlink, digest)
    return out


def wait_until(check, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()
