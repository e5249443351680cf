"""Topic categories of the questions (keep rate by topic): both topic-file formats, errors, lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragsft_assets.multihop import topics as tp

DATA = Path(__file__).parent / "data" / "wikispeedia"


def test_wikispeedia_categories_give_the_top_level_subject_of_decoded_titles() -> None:
    topics = tp.read_topics(DATA / "categories.tsv")
    assert topics["Édouard Manet"] == "People"  # %C3%89douard_Manet, subject.People.Artists
    assert topics["Abraham Lincoln"] == "People"
    # Åland is listed under Countries then Geography: the first listed category wins
    assert topics["Åland"] == "Countries"
    assert not any(t.startswith(("subject", "%")) or "_" in t for t in topics)


def test_plain_topics_file_and_malformed_lines() -> None:
    lines = ["# title\ttopic", "", "Valrenne\tGéographie", "Étienne Marchal\tPersonnalités", "Valrenne\tArts"]
    assert tp.parse_topics(lines) == {"Valrenne": "Géographie", "Étienne Marchal": "Personnalités"}
    for bad in ("Valrenne Géographie", "\tGéographie", "Valrenne\t "):
        with pytest.raises(ValueError, match="topics:1: expected 'title<TAB>topic'"):
            tp.parse_topics([bad])


def test_topic_file_lookup_and_question_topics(tmp_path: Path) -> None:
    assert tp.find_topic_file(tmp_path) is None  # no categories known: no keep rate by topic
    (tmp_path / "categories.tsv").write_text("A_b\tsubject.Science.Chemistry\n", encoding="utf-8")
    assert tp.find_topic_file(tmp_path) == tmp_path / "categories.tsv"
    (tmp_path / "topics.tsv").write_text("A b\tArts\n", encoding="utf-8")
    assert tp.find_topic_file(tmp_path) == tmp_path / "topics.tsv"  # the plain file first
    assert tp.find_topic_file(tmp_path, "categories.tsv") == tmp_path / "categories.tsv"
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        tp.find_topic_file(tmp_path, "missing.tsv")
    topics = tp.read_topics(tmp_path / "categories.tsv")
    assert topics == {"A b": "Science"}
    assert tp.question_topics({"q1": "A b", "q2": "Other"}, topics) == {"q1": "Science"}
