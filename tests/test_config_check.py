"""A value spelt like one of a setting's words gets "did you mean", as a misspelt key does."""

from __future__ import annotations

import json

import pytest


def _exec_config(configure, confinement: str):
    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {"exec": {"confinement": confinement}}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("written", "meant"),
    [("bubblewrap", "bwrap"), ("Bubblewrap", "bwrap"), ("landlok", "landlock")],
)
def test_a_misspelt_confinement_stops_with_the_word_it_is_closest_to(
    nanobot_run, configure, written, meant
):
    _exec_config(configure, written)
    result = nanobot_run("status")
    assert result.returncode == 2
    assert (
        f'tools.exec.confinement: expected "auto", "bwrap", "landlock" or "none", '
        f'got "{written}"; did you mean "{meant}"?'
    ) in result.stderr
    assert '"bwrap" is bubblewrap' in result.stderr  # the hint says what each word means


def test_doctor_shows_the_closest_confinement_and_what_the_words_mean(nanobot_run, configure):
    _exec_config(configure, "bubblewrap")
    result = nanobot_run("doctor", "--offline")
    assert result.returncode == 1
    assert 'did you mean "bwrap"?' in result.stdout
    assert '"bwrap" is bubblewrap' in result.stdout


def test_a_word_close_to_nothing_gets_the_list_without_a_guess(nanobot_run, configure):
    _exec_config(configure, "sandbox")
    result = nanobot_run("status")
    assert result.returncode == 2
    assert '"landlock" or "none", got "sandbox"\n' in result.stderr.replace("\r", "")
    assert "did you mean" not in result.stderr
