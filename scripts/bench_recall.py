"""Retrieval benchmark for search_history, on synthetic long conversations.

Six months of dated sessions of everyday chat; facts are said once, in passing, among distractors
that reuse the same names and words in other contexts. Each question is a paraphrase of what was
said, with the message(s) that answer it marked. Kinds: a single fact; two facts said in two
different sessions (both must be found); a date ("when did I ...": the answer is the dated message).

The archive is written with the product's own writers, in three shapes:
- session: every session archived as ONE HISTORY.md entry (MemoryStore.append_raw_archive);
- message: every message archived as its own HISTORY.md entry;
- files:   the session files themselves (what the recall index also reads; HISTORY.md empty).

The model's call is imitated with two query styles: the question's content words, and its 3 rarest
words (by document frequency in the archive). A question counts as found at k when every answering
message's text is in what the engine returns with limit k. Engines:
- tool:       search_history as the model calls it (its output caps: 12,000 characters);
- substring:  the old search_history (every word must appear, newest first, entries cut at 3,000
              characters, 12,000 in all);
- bm25-capped: SQLite FTS5 BM25 over the HISTORY.md entries (or messages), used directly, its top k
              entries cut to the same caps as the tool;
- bm25-full:  the same, top k entries uncapped (more output than the tool may give).

The comparison is like for like: both engines get the same query string, and the tool's result and
bm25-capped are held to the same 12,000 characters (the tool spends them on hits, their neighbours
and labels; bm25-capped on whole entries of at most 3,000). Identical texts said by different
people (rarest-word queries often drop the name) tie in BM25: both engines then keep FTS5's order.

    .venv/bin/python scripts/bench_recall.py            # prints recall@5 and @10 tables
    .venv/bin/python scripts/bench_recall.py --seeds 4,5,6   # a second, independent question set
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

NAMES = [
    "Maya",
    "Tomasz",
    "Ingrid",
    "Kofi",
    "Aurelio",
    "Sunita",
    "Bartek",
    "Yuki",
    "Oksana",
    "Dario",
    "Lindiwe",
    "Henrik",
    "Paloma",
    "Ravi",
    "Greta",
    "Mateus",
    "Noor",
    "Elif",
    "Joaquin",
    "Saoirse",
    "Tariq",
    "Wen",
]
RELATIONS = ["sister", "brother", "cousin", "neighbour", "colleague", "friend", "aunt", "nephew"]
CITIES = [
    "Lisbon",
    "Krakow",
    "Osaka",
    "Valparaiso",
    "Tallinn",
    "Marrakesh",
    "Hobart",
    "Ljubljana",
    "Cusco",
    "Bergen",
    "Tbilisi",
    "Halifax",
    "Porto",
    "Seville",
    "Hanoi",
    "Reykjavik",
]
JOBS = [
    "pharmacist",
    "carpenter",
    "data analyst",
    "midwife",
    "sound engineer",
    "translator",
    "geologist",
    "baker",
    "paramedic",
    "architect",
]
COMPANIES = [
    "Brightwater",
    "Northgate Labs",
    "Copperleaf",
    "Halden & Sons",
    "Bluefin Studio",
    "Orrery Health",
    "Kestrel Logistics",
    "Mosaic Foods",
]
PETS = ["Pepper", "Biscuit", "Juniper", "Mochi", "Rasmus", "Clementine", "Pixel", "Waffles"]
ANIMALS = ["dog", "cat", "rabbit", "parrot"]
FOODS = ["chicken", "peanuts", "shellfish", "oats", "dairy", "soy"]
HOBBIES = [
    "pottery",
    "bouldering",
    "choir",
    "chess club",
    "salsa lessons",
    "birdwatching",
    "woodturning",
]
WEEKDAYS = ["Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays"]
PLACES = [
    "community centre",
    "library annex",
    "church hall",
    "climbing gym",
    "youth club",
    "rec centre",
]

# (statement said in passing, question paraphrasing it). {..} slots are filled per fact.
SINGLE = [
    (
        "oh, before I forget, my {rel} {name} started a new job as a {job} at {company} last week",
        "Where is my {rel} {name} working these days, and doing what?",
    ),
    (
        "random thing but {name}'s {hobby} meets at the {place} on {day}",
        "Which day of the week is {name}'s {hobby} held?",
    ),
    (
        "I finally booked the flights to {city} for the spring break with {name}",
        "Which city am I flying to with {name} over the spring holidays?",
    ),
    (
        "side note: the wifi at my {rel} {name}'s flat is under the name {company} guest",
        "What network name does {name}'s wireless use?",
    ),
    (
        "{name} and I decided to name the sourdough starter {pet}, silly I know",
        "What did {name} and I call the bread starter?",
    ),
    (
        "my {rel} {name} is moving to {city} in the autumn, I'll miss them",
        "Where is my {rel} {name} relocating to?",
    ),
    (
        "btw my locker at the {place} in {city} is number {num}, I keep forgetting",
        "What's my locker number at the {place} in {city}?",
    ),
    (
        "the plumber in {city} said the boiler is a {company} model from {num}",
        "Which brand is the heating boiler at the {city} place?",
    ),
]
DOUBLE = [  # two statements in two sessions; the question needs both
    (
        "{name} and I adopted a {animal} from the shelter and named it {pet}",
        "{pet} turns out to be allergic to {food}, vet says",
        "What is the {animal} {name} and I adopted called, and what is it allergic to?",
    ),
    (
        "{name} got engaged last weekend!",
        "the wedding of {name} will be in {city}, they picked a vineyard",
        "{name} got engaged: where is the wedding going to be?",
    ),
    (
        "I signed up for {hobby} with my {rel} {name}",
        "{name}'s {hobby} costs {num} a term, which is steep",
        "What class did I sign up for with {name}, and what does it cost per term?",
    ),
]
DATED = [
    (
        "went to the dentist {name} recommended this morning, the cracked molar is fixed",
        "When did I see the dentist {name} recommended about my tooth?",
    ),
    (
        "just got back from the {city} marathon, legs are jelly",
        "When did I run the race in {city}?",
    ),
    ("today I handed in my notice at {company}", "When did I resign from {company}?"),
    (
        "{name} and I planted the {food} patch in the back garden today",
        "On what date did {name} and I put the {food} in the garden?",
    ),
    (
        "passed my driving test in {city} this afternoon!!",
        "When did I get my driving licence in {city}?",
    ),
]
FILLER_USER = [
    "can you help me plan meals for the week, something with {food_any}?",
    "I'm thinking about work again, the meeting with {name_any} was long",
    "what's a good stretch routine after a run?",
    "remind me how to convert a recipe from cups to grams",
    "the weather in {city_any} looks grim this week, should I still travel?",
    "{name_any} says hi, we had coffee near the {place_any}",
    "I need a gift idea for my {rel_any}, they like {hobby_any}",
    "how do I fix a squeaky door hinge?",
    "summarise the pros and cons of leasing versus buying a car",
    "what should I pack for a weekend trip with the {animal_any}?",
    "I have a group call on {day_any}, help me draft an agenda",
    "is it normal for a {animal_any} to sleep all day?",
    "my {rel_any} wants to start {hobby_any}, where do beginners begin?",
    "what's the difference between a flight delay and a cancellation refund?",
]
FILLER_ASSISTANT = [
    "Sure. A simple plan: batch-cook on Sunday, keep two quick dinners in reserve, and rotate {food_any} with beans.",
    "That sounds tiring. Want me to turn the notes from the meeting into a short list of actions?",
    "Try five minutes: calves, hamstrings, hip flexors, then a slow walk.",
    "Roughly: one cup of flour is 120 g, sugar 200 g, butter 225 g.",
    "If the forecast holds, pack layers; trains to {city_any} usually run in bad weather.",
    "Nice! Anything you want me to remember from that chat?",
    "For someone who likes {hobby_any}, a beginner kit or a voucher for a class works well.",
    "A drop of oil on the hinge pin, then work the door back and forth.",
    "Leasing: lower monthly cost, no resale risk; buying: cheaper over time, no mileage limits.",
    "Water bowl, lead, treats, a towel, and the vet's number.",
    "Agenda: goals, blockers, decisions needed, next steps. Ten minutes each.",
    "Many do; watch for changes in appetite, and ask the vet if it lasts.",
    "Start with a taster session at a local club; most lend equipment the first time.",
    "A cancellation usually gets a full refund; a long delay may earn compensation.",
]
STOP = set(
    "a an and are as at be been but by can could did do does for from had has have he her his how i if in "
    "into is it its me my of on or our she so than that the their them then there these they this to us "
    "was we were what when where which who whom why will with would you your about whats what's".split()
)


@dataclass
class Question:
    kind: str  # single | double | date
    text: str
    evidence: list[str]  # the exact texts of the answering messages
    sessions: list[int] = field(default_factory=list)


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def generate(seed: int, sessions: int, per_session: int) -> tuple[list[list[dict]], list[Question]]:
    rng = random.Random(seed)
    start = datetime(2025, 9, 1, 9, 0)
    convo: list[list[dict]] = []
    for s in range(sessions):
        when = start + timedelta(days=s * 180 // sessions, hours=rng.randint(0, 10))
        msgs = []
        for i in range(per_session):
            pool = FILLER_USER if i % 2 == 0 else FILLER_ASSISTANT
            slots = {
                "food_any": rng.choice(FOODS),
                "name_any": rng.choice(NAMES),
                "city_any": rng.choice(CITIES),
                "place_any": rng.choice(PLACES),
                "rel_any": rng.choice(RELATIONS),
                "hobby_any": rng.choice(HOBBIES),
                "animal_any": rng.choice(ANIMALS),
                "day_any": rng.choice(WEEKDAYS),
            }
            msgs.append(
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": _fill(rng.choice(pool), slots),
                    "timestamp": (when + timedelta(minutes=2 * i)).isoformat(),
                }
            )
        convo.append(msgs)
    questions: list[Question] = []
    used: set[int] = set()

    def place(text: str) -> int:
        """Say `text` as a user message in a random session (replacing one filler user message)."""
        while True:
            s, i = rng.randrange(sessions), rng.randrange(0, per_session, 2)
            if (s * 1000 + i) not in used:
                used.add(s * 1000 + i)
                convo[s][i]["content"] = text
                return s

    def slots() -> dict[str, str]:
        return {
            "name": rng.choice(NAMES),
            "rel": rng.choice(RELATIONS),
            "job": rng.choice(JOBS),
            "company": rng.choice(COMPANIES),
            "city": rng.choice(CITIES),
            "hobby": rng.choice(HOBBIES),
            "place": rng.choice(PLACES),
            "day": rng.choice(WEEKDAYS),
            "pet": rng.choice(PETS),
            "animal": rng.choice(ANIMALS),
            "food": rng.choice(FOODS),
            "num": str(rng.randint(100, 2999)),
        }

    for k in range(60):
        said, asked = SINGLE[k % len(SINGLE)]
        f = slots()
        text = _fill(said, f)
        questions.append(Question("single", _fill(asked, f), [text], [place(text)]))
    for k in range(30):
        a, b, asked = DOUBLE[k % len(DOUBLE)]
        f = slots()
        ta, tb = _fill(a, f), _fill(b, f)
        questions.append(Question("double", _fill(asked, f), [ta, tb], [place(ta), place(tb)]))
    for k in range(30):
        said, asked = DATED[k % len(DATED)]
        f = slots()
        text = _fill(said, f)
        questions.append(Question("date", _fill(asked, f), [text], [place(text)]))
    return convo, questions


def words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())


def content_query(q: str) -> str:
    return " ".join(w for w in words(q) if w not in STOP)


def rarest_query(q: str, df: Counter[str], n: int = 3) -> str:
    cands = sorted({w for w in words(q) if w not in STOP}, key=lambda w: (df.get(w, 0), w))
    return " ".join(cands[:n])


def write_archive(home: Path, shape: str, convo: list[list[dict]]) -> Path:
    os.environ["NANOBOT_HOME"] = str(home)
    from nanobot.memory.store import MemoryStore
    from nanobot.session.store import SessionStore

    workspace = home / "workspace"
    memory = MemoryStore(workspace)
    memory.dir.mkdir(parents=True, exist_ok=True)
    if shape == "files":
        store = SessionStore(home / "sessions")
        for s, msgs in enumerate(convo):
            session = store.open(f"cli:s{s:03d}")
            store.append(session, msgs)
            store.close(session)
    else:
        for msgs in convo:
            if shape == "session":
                memory.append_raw_archive(msgs, "benchmark archive")
            else:
                for m in msgs:
                    memory.append_raw_archive([m], "benchmark archive")
    return workspace


# ---- engines --------------------------------------------------------------------------------------

ENTRY_CHARS, RESULT_CHARS = 3000, 12000


def capped(texts: list[str]) -> str:
    out, used = [], 0
    for t in texts:
        t = t[:ENTRY_CHARS]
        if used + len(t) > RESULT_CHARS:
            break
        out.append(t)
        used += len(t) + 2
    return "\n\n".join(out)


class Baseline:
    """FTS5 BM25 used directly over the archive's units (HISTORY.md entries, or messages)."""

    def __init__(self, units: list[str]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
        self.db.executemany("INSERT INTO t (text) VALUES (?)", ((u,) for u in units))

    def top(self, query: str, k: int) -> list[str]:
        terms = [w for w in words(query)]
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        return [
            r[0]
            for r in self.db.execute(
                "SELECT text FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (match, k)
            )
        ]


def build_index(workspace: Path) -> None:
    """Index the whole archive before the first question, as `nanobot history search` does: the tool
    itself catches up for at most 3 seconds of wall time per call, which a loaded machine can run out
    of on a first call, leaving the first questions a partial index (and the figures depending on
    the load)."""
    from nanobot.memory import history as history_log

    history_log.search(
        history_log.Ranked("index", refresh=None), history=workspace / "memory/HISTORY.md"
    )


def units_of(home: Path, shape: str, convo: list[list[dict]]) -> list[str]:
    from nanobot.memory import history as history_log
    from nanobot.messages import transcript_lines

    if shape == "files":
        return ["\n".join(transcript_lines(m)) for msgs in convo for m in msgs]
    return [e.text for e in history_log.iter_entries(home / "workspace/memory/HISTORY.md")]


def substring(workspace: Path, query: str, k: int) -> str:
    from nanobot.memory import history as history_log

    path = workspace / "memory/HISTORY.md"
    if not path.is_file():
        return ""
    terms = query.split()
    return (
        capped([e.text for e in history_log.search_newest(path, terms, limit=k)]) if terms else ""
    )


def tool(workspace: Path, query: str, k: int) -> str:
    from nanobot.errors import ToolError
    from nanobot.tools.base import ToolContext
    from nanobot.tools.recall import SearchHistoryTool

    try:
        return asyncio.run(
            SearchHistoryTool(ToolContext(workspace=workspace), session_key="cli:bench").run(
                query=query, limit=k
            )
        )
    except ToolError:
        return ""


def found(output: str, q: Question) -> bool:
    flat = " ".join(output.split())
    return all(" ".join(e.split()) in flat for e in q.evidence)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seeds", default="1,2,3", help="one archive and question set per seed, results pooled"
    )
    parser.add_argument("--sessions", type=int, default=120, help="sessions over six months")
    parser.add_argument("--messages", type=int, default=40, help="messages per session")
    args = parser.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    kinds = ["single", "double", "date"]
    engines = ["tool", "substring", "bm25-capped", "bm25-full"]
    table: dict[tuple[str, str, int, str], list[tuple[str, bool]]] = {}
    sizes: dict[str, int] = {}
    total_q = 0
    for seed in seeds:
        convo, questions = generate(seed, args.sessions, args.messages)
        total_q += len(questions)
        for shape in ("session", "message", "files"):
            home = Path(tempfile.mkdtemp(prefix=f"bench-recall-{shape}-"))
            workspace = write_archive(home, shape, convo)
            build_index(workspace)
            units = units_of(home, shape, convo)
            sizes[shape] = sizes.get(shape, 0) + len(units)
            df: Counter[str] = Counter(w for u in units for w in set(words(u)))
            base = Baseline(units)
            for style in ("content", "rarest"):
                for k in (5, 10):
                    for q in questions:
                        query = (
                            content_query(q.text)
                            if style == "content"
                            else rarest_query(q.text, df)
                        )
                        top = base.top(query, k)
                        got = {
                            "tool": found(tool(workspace, query, k), q),
                            "substring": found(substring(workspace, query, k), q)
                            if shape != "files"
                            else False,
                            "bm25-capped": found(capped(top), q),
                            "bm25-full": found("\n\n".join(top), q),
                        }
                        for engine, ok in got.items():
                            table.setdefault((shape, style, k, engine), []).append((q.kind, ok))
            shutil.rmtree(home, ignore_errors=True)
    print(
        f"seeds {seeds}: {len(seeds)} x {args.sessions} sessions x {args.messages} messages over 6 months; "
        f"{total_q} questions (per seed: 60 single fact, 30 two facts in two sessions, 30 dates)"
    )
    print(
        "evidence recall: the share of questions whose every answering message is in what the engine returned"
    )
    for shape in ("session", "message", "files"):
        print(f"\n== archive unit: {shape} ({sizes[shape] // len(seeds):,} units per seed) ==")
        print(
            f"{'query':8} {'k':>3} {'engine':12} " + " ".join(f"{k:>7}" for k in kinds) + "     all"
        )
        for style in ("content", "rarest"):
            for k in (5, 10):
                for engine in engines:
                    if engine == "substring" and shape == "files":
                        continue
                    rows = table[(shape, style, k, engine)]
                    by = [
                        sum(ok for kind_, ok in rows if kind_ == kind)
                        / max(1, sum(kind_ == kind for kind_, _ in rows))
                        for kind in kinds
                    ]
                    print(
                        f"{style:8} {k:>3} {engine:12} "
                        + " ".join(f"{b:7.1%}" for b in by)
                        + f" {sum(ok for _, ok in rows) / len(rows):7.1%}"
                    )


if __name__ == "__main__":
    main()
