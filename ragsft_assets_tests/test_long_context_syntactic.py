"""Syntactic questions: answers recounted independently on real NarrativeQA summaries."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.long_context.syntactic import TYPES, SyntacticConfig, generate, third_of, words

DATA = Path(__file__).parent / "data" / "narrativeqa" / "narrativeqa_test_tiny_50.jsonl"


def _passages() -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for line in DATA.read_bytes().splitlines():
        p = orjson.loads(line)["passage"]
        seen.setdefault(p, f"nqa-{len(seen):02d}")
    return [(pid, text) for text, pid in seen.items()]


def _recount_words(text: str) -> list[str]:
    """A second tokenizer, character by character (no regex): runs of isalnum, lower-cased."""
    out, cur = [], []
    for ch in text:
        if ch.isalnum():
            cur.append(ch)
        elif cur:
            out.append("".join(cur).lower())
            cur = []
    if cur:
        out.append("".join(cur).lower())
    return out


def _count_sublist(tokens: list[str], target: list[str]) -> int:
    k = len(target)
    return sum(1 for i in range(len(tokens) - k + 1) if tokens[i : i + k] == target)


def test_answers_are_exact_on_real_summaries() -> None:
    passages = _passages()
    texts = dict(passages)
    qas, skipped = generate(passages, seed=7)
    assert not skipped
    assert len(qas) == 5 * len(passages)
    by_type = Counter(q.type for q in qas)
    assert set(by_type) == set(TYPES)
    answers = Counter()
    for q in qas:
        tokens = _recount_words(texts[q.id])
        target = q.target.split(" ")
        assert q.target == q.target.lower() and f"`{q.target}`" in q.question
        n = _count_sublist(tokens, target)
        if q.type in ("word_occurs", "phrase_occurs"):
            assert q.answer == ("yes" if n else "no")
        elif q.type in ("word_count", "phrase_count"):
            assert q.answer == str(n)
        else:
            assert n > 0
            first = tokens.index(target[0])
            assert q.answer == ("beginning", "middle", "end")[(3 * first) // len(tokens)]
        assert len(target) == (4 if q.type.startswith("phrase") else 1)
        if n:  # present targets are rare: under 10% of the words (or 4-grams)
            total = len(tokens) - len(target) + 1
            assert n < 0.10 * total
        answers[(q.type, q.answer in ("no", "0"))] += 1
    # Absent draws exist, so "no" and 0 are real answers.
    assert answers[("word_occurs", True)] > 0 and answers[("phrase_occurs", True)] > 0
    assert answers[("word_occurs", False)] > 0 and answers[("word_count", True)] > 0


def test_tokenization_rule() -> None:
    assert words("L'été 1940, Jean-Paul_Sartre: «Huis clos»!") == [
        "l",
        "été",
        "1940",
        "jean",
        "paul",
        "sartre",
        "huis",
        "clos",
    ]
    assert _recount_words("L'été 1940, Jean-Paul_Sartre") == words("L'été 1940, Jean-Paul_Sartre")


def test_overlapping_phrases_and_thirds() -> None:
    # "a a a a a" holds the 4-gram "a a a a" twice (overlaps counted).
    text = "a a a a a " + " ".join(f"w{i}" for i in range(100))
    qas, _ = generate([("p", text)], seed=1, config=SyntacticConfig(max_share=1.0), types=("phrase_count",))
    assert _count_sublist(words(text), ["a"] * 4) == 2
    assert qas[0].answer == str(_count_sublist(words(text), qas[0].target.split(" ")))
    assert [third_of(i, 9) for i in range(9)] == ["beginning"] * 3 + ["middle"] * 3 + ["end"] * 3
    with pytest.raises(ValueError):
        third_of(9, 9)


def test_seeded_order_independent_and_skips_counted() -> None:
    passages = _passages()[:6]
    a, _ = generate(passages, seed=3)
    b, _ = generate(list(reversed(passages)), seed=3)
    assert sorted(tuple(q.to_dict().values()) for q in a) == sorted(tuple(q.to_dict().values()) for q in b)
    c, _ = generate(passages, seed=4)
    assert [q.target for q in a] != [q.target for q in c]
    _, skipped = generate([("tiny", "one two")], seed=1)
    assert skipped["phrase_occurs:no_rare_target"] == 1 and skipped["word_occurs:no_rare_target"] == 1
    with pytest.raises(ValueError, match="twice"):
        generate([("x", "a"), ("x", "b")])


def test_cli_writes_the_documented_fields(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(orjson.dumps({"id": i, "passage": p}) + b"\n" for i, p in _passages()[:3]))
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(main, ["syntactic", str(src), "--out", str(out), "--seed", "5"])
    assert res.exit_code == 0, res.output
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(rows) == 15 and all(list(r) == ["id", "type", "question", "answer", "target"] for r in rows)
    again = tmp_path / "again.jsonl"
    CliRunner().invoke(main, ["syntactic", str(src), "--out", str(again), "--seed", "5"])
    assert again.read_bytes() == out.read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "passage": "x y"}\n{"id": "b"}\n')
    res = CliRunner().invoke(main, ["syntactic", str(bad)])
    assert res.exit_code != 0 and "bad.jsonl:2" in res.output and "'passage'" in res.output


def test_context_questions_count_over_the_documents_and_4grams_stay_within_one() -> None:
    """Variant 2 asks the card's questions ("in the passage") of its context: words count over all
    its documents, but a 4-gram that would span the end of one document and the start of the next is
    no phrase of the context."""
    from ragsft_assets.long_context.syntactic import _Passage

    filler = " ".join(f"w{i}" for i in range(20))
    docs = [f"{filler} alpha beta gamma", "delta epsilon zeta eta theta " + filler]
    p = _Passage.of("ctx", docs)
    assert p.word_counts["alpha"] == 1 and p.word_counts["w3"] == 2 and len(p.tokens) == 48
    assert "beta gamma delta epsilon" not in p.phrase_counts  # spans two documents
    assert p.phrase_counts["delta epsilon zeta eta"] == 1
    qas, _ = generate([("ctx", docs)], seed=2)
    assert qas and all(q.question.endswith(" occur in the passage?") for q in qas)
    for q in qas:  # every answer recounted over the documents, phrases within each
        if q.type == "phrase_count":
            assert q.answer == str(sum(" ".join(words(d)).count(q.target) for d in docs))
    single, _ = generate([("one", " ".join(docs))], seed=2)
    assert all(q.question.endswith(" occur in the passage?") for q in single)  # `ragsft syntactic`


CARD_002 = Path(__file__).parent / "data" / "cards" / "002_f811024c0714668e.txt"


def test_the_questions_are_the_cards_word_for_word() -> None:
    """Synth-Long-SFT32K: "(1) Does the word `X` occur in the passage? (2) How often does the word `X`
    occur in the passage? (3) Does the phrase `X` occur in the passage? (4) How often does the phrase
    `X` occur in the passage? and (5) Where does the word `X` occur in the passage?" """
    from ragsft_assets.long_context.syntactic import QUESTIONS

    card = CARD_002.read_text(encoding="utf-8")
    for k, qtype in enumerate(TYPES, start=1):
        assert f"({k}) {QUESTIONS[qtype].format(x='X')}" in card, qtype
    qas, _ = generate([("p", "Alpha beta gamma delta. " * 3 + "Epsilon zeta eta theta iota kappa.")], seed=1)
    by_type = {q.type: q for q in qas}
    assert (
        by_type["word_count"].question
        == f"How often does the word `{by_type['word_count'].target}` occur in the passage?"
    )
    assert all("Answer" not in q.question and '"' not in q.question for q in qas)  # nothing appended
