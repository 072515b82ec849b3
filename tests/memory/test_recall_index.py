"""The recall index's ranking: the second hop, and words found in too many units to rank."""

from __future__ import annotations

import pytest
from nanobot.memory import recall_index
from nanobot.memory.recall_index import RecallIndex, default_index_path
from nanobot.paths import sessions_dir
from nanobot.session.store import SessionStore


def write_session(key: str, texts: list[str], day: int) -> None:
    store = SessionStore()
    session = store.open(key)
    try:
        store.append(
            session,
            [
                {"role": "user", "content": text, "timestamp": f"2026-01-{day:02d}T10:{i:02d}:00"}
                for i, text in enumerate(texts)
            ],
        )
    finally:
        store.close(session)


def index() -> RecallIndex:
    return RecallIndex(default_index_path(), sessions=sessions_dir(), history=None)


FILLER = [f"talked about the weather and the garden, day {i}" for i in range(30)]


def test_the_second_fact_tied_to_the_best_hit_by_a_name_the_question_does_not_say_comes_first():
    # Three pets are allergic to something; the question names the adopted cat's owner, not the cat.
    write_session(
        "cli:a",
        FILLER[:10] + ["Aurelio and I adopted a cat from the shelter and named it Waffles"],
        3,
    )
    write_session(
        "cli:b", FILLER[10:20] + ["Waffles turns out to be allergic to shellfish, vet says"], 9
    )
    write_session(
        "cli:c",
        FILLER[20:]
        + [
            "Juniper turns out to be allergic to oats, vet says",
            "Mochi turns out to be allergic to soy, vet says",
            "Henrik and I adopted a dog from the shelter and named it Pixel",
        ],
        20,
    )
    idx = index()
    idx.refresh()
    hits = [h.unit.text for h in idx.search("cat aurelio adopted called allergic", limit=5)]
    assert hits[0] == "Aurelio and I adopted a cat from the shelter and named it Waffles"
    # the allergy of Waffles before the other two, though they match "allergic" as well (shorter, newer)
    allergies = [text for text in hits if "allergic" in text]
    assert (
        len(allergies) == 3
        and allergies[0] == "Waffles turns out to be allergic to shellfish, vet says"
    )


def test_without_a_shared_rare_word_the_order_is_bm25s():
    write_session(
        "cli:a",
        FILLER[:10]
        + ["the boiler in Porto is a Brightwater model", "the boiler was serviced, all fine"],
        3,
    )
    idx = index()
    idx.refresh()
    ranked = [h.unit.text for h in idx.search("boiler porto", limit=3)]
    assert ranked == [
        "the boiler in Porto is a Brightwater model",
        "the boiler was serviced, all fine",
    ]


@pytest.mark.parametrize(
    "query, newest_first", [("weather garden", True), ("weather quokka", False)]
)
def test_common_words_are_counted_boundedly_and_all_common_queries_take_units_holding_every_word(
    monkeypatch, query, newest_first
):
    monkeypatch.setattr(recall_index, "_COMMON_DOCS", 5)
    write_session(
        "cli:a", FILLER + ["weather aside, the quokka escaped", "only the weather today"], 5
    )
    idx = index()
    idx.refresh()
    hits = idx.search(query, limit=3)
    texts = [h.unit.text for h in hits]
    if (
        newest_first
    ):  # both words in more than 5 units: the newest units holding both, not "only the weather"
        assert texts == [FILLER[29], FILLER[28], FILLER[27]]
    else:
        assert texts[0] == "weather aside, the quokka escaped" and len(texts) == 1
    # what was counted stops one past the bound, however common the word
    db = idx._connect()
    assert recall_index._doc_counts(db, ["weather", "quokka"], 5) == [6, 1]


def test_a_long_message_is_one_hit_however_many_of_its_passages_match():
    # The long message's three passages all say "walrus"; they took three of the five hits.
    long = "\n".join(f"walrus notes, page {p}, " + "filler words " * 110 + "end" for p in range(3))
    write_session("cli:a", FILLER[:5] + [long], 3)
    write_session("cli:b", FILLER[5:10] + ["the walrus at the zoo is called Olaf"], 9)
    write_session("cli:c", FILLER[10:15] + ["a walrus sticker for the fridge"], 20)
    idx = index()
    idx.refresh()
    hits = idx.search("walrus", limit=5)
    assert sorted(h.unit.session for h in hits) == ["cli:a", "cli:b", "cli:c"]
    (found,) = [h for h in hits if h.unit.session == "cli:a"]
    assert found.unit.text in long and len(found.unit.text) < len(long)  # its best passage


def test_a_hit_in_a_long_message_shows_the_messages_around_it_not_its_own_next_passage():
    # An answer of three passages between two questions: the hit is its first passage, and what
    # came before and after it are the two questions (the model must not read page 1 as a reply)
    long = "\n".join(f"walrus notes, page {p}, " + "filler words " * 110 + "end" for p in range(3))
    store = SessionStore()
    session = store.open("cli:a")
    try:
        store.append(
            session,
            [
                {"role": "user", "content": "what do you know about the walrus?"},
                {"role": "assistant", "content": long},
                {"role": "user", "content": "thanks, and the seals?"},
            ],
        )
    finally:
        store.close(session)
    idx = index()
    idx.refresh()
    (hit,) = idx.search("walrus page 0", limit=1)
    assert hit.unit.seq == 1 and hit.unit.part == 0
    assert hit.before is not None and hit.before.text == "what do you know about the walrus?"
    assert hit.after is not None and hit.after.role == "user"
    assert hit.after.text == "thanks, and the seals?"


def test_new_moves_the_indexed_conversation_to_its_archive_without_reading_it_again():
    store = SessionStore()
    session = store.open("cli:long")
    store.append(
        session,
        [{"role": "user", "content": f"note {i}: the walrus count is {i}"} for i in range(300)],
    )
    idx = index()
    read_first = idx.refresh().bytes_done
    assert read_first > 20_000 and len(idx.search("walrus", limit=50)) == 50
    kept = store.clear(session)  # /new: the file is renamed to the archive's name
    store.append(session, [{"role": "user", "content": "a walrus again"}])
    store.close(session)
    assert kept is not None and (archive := store.archive_path(kept)) is not None
    report = idx.refresh()
    assert report.complete and report.bytes_done < 1_000  # the new live file only
    hits = idx.search("walrus count 299", limit=3)
    assert hits[0].unit.session == kept and hits[0].unit.ref == f"{kept}#299"
    assert [h.unit.text for h in idx.search("walrus", session="cli:long", limit=500)].count(
        "a walrus again"
    ) == 1
    assert len(idx.search("walrus", session=kept, limit=500)) == 300
    assert idx.stats()["sources"] == 2 and archive.is_file()
