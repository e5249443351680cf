"""Checks, normalization, the ablation cascade, caps, HotpotQA layouts and the audit (pure logic)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest

from ragsft_assets.multihop import ablations, audit, caps, hotpot_format
from ragsft_assets.multihop.generation import Doc, Pair, draft_rows
from ragsft_assets.multihop.normalize import answer_matches, is_impossible, normalize_text
from ragsft_assets.multihop.question_checks import check_draft
from ragsft_assets.prompts import load_prompt
from ragsft_assets_tests.llm_double import ScriptedChatModel

HOTPOT = Path(__file__).resolve().parent / "data" / "hotpotqa" / "hotpotqa_train_distractor_70.json"
A = Doc("a", "Le Petit Prince", ("Le Petit Prince est un livre.", "Il est publié par Gallimard."), "train")
B = Doc(
    "b",
    "Gallimard",
    ("Gallimard est un éditeur.", "Il a été fondé à Paris en 1911.", "Livres, revues et disques."),
    "train",
)
GOOD = {
    "question": "En quelle année l'éditeur du Petit Prince a-t-il été fondé ?",
    "answer": "1911",
    "support_a": [1],
    "support_b": [1],
    "alias": "Gallimard",
}


@pytest.mark.parametrize(
    ("change", "reasons"),
    [
        ({}, []),
        ({"question": "  ", "answer": "1911"}, ["empty_question_or_answer"]),
        ({"answer": "1912"}, ["answer_not_in_b"]),
        ({"question": "En quelle année Gallimard a-t-il été fondé ?"}, ["question_names_bridge"]),
        (
            {"alias": "la maison", "question": "En quelle année la Maison a-t-elle été fondée ?"},
            ["question_names_bridge"],
        ),
        ({"question": "Est-ce en 1911 que l'éditeur du livre a été fondé ?"}, ["answer_in_question"]),
        ({"support_b": [3]}, ["support_out_of_bounds"]),
        ({"support_a": [-1]}, ["support_out_of_bounds"]),
        ({"support_a": []}, ["support_missing"]),
        ({"answer": "Livres, revues et disques"}, ["answer_enumeration"]),
        ({"answer": "Il a été fondé à Paris"}, ["answer_is_clause"]),
    ],
)
def test_each_check_reason(change, reasons):
    assert check_draft({**GOOD, **change}, A, B) == reasons


def test_answer_too_long_by_words_and_by_chars():
    long_b = Doc("b", "Gallimard", ("x " * 12, "y" * 71), "train")
    assert "answer_too_long" in check_draft({**GOOD, "answer": ("x " * 11).strip()}, A, long_b)
    assert "answer_too_long" in check_draft({**GOOD, "answer": "y" * 71}, A, long_b)
    assert "answer_too_long" not in check_draft({**GOOD, "answer": "y" * 70}, A, long_b)


@pytest.mark.parametrize(
    ("gold", "response", "match"),
    [
        ("Éditions Gallimard", "editions gallimard.", True),
        ("la Seine", "Seine", True),
        ("The Beatles", "beatles!", True),
        ("l'Élysée", "Elysee", True),
        ("Paris", "It was Paris, I think", True),
        ("Paris", "Parisian", False),
        ("Paris", "IMPOSSIBLE", False),
        ("", "anything", False),
    ],
)
def test_normalized_answer_matching(gold, response, match):
    assert answer_matches(gold, response) is match


def test_impossible_detection_and_normalization():
    assert (
        is_impossible("IMPOSSIBLE.")
        and is_impossible(" impossible ")
        and not is_impossible("It is impossible")
    )
    assert normalize_text("L'Île-de-France, les Gaules") == "ile de france gaules"


def _item(qid: str, question: str = "Q?") -> ablations.JudgeItem:
    return ablations.JudgeItem(qid, question, "Paris", "A", "a text", "B", "b text")


def _judge(replies):
    def respond(messages):
        text = messages[-1]["content"]
        kind = (
            "ab"
            if "Document 2" in text
            else "none"
            if "(no document)" in text
            else "a"
            if ": A\n" in text
            else "b"
        )
        question = text.split("Question: ")[1].split("\n")[0]
        return replies.get((question, kind), "Paris" if kind == "ab" else "IMPOSSIBLE")

    return ScriptedChatModel(respond)


def test_cascade_stops_at_first_failure_in_the_configured_order():
    judge = _judge(
        {("Q1", "b"): "Paris", ("Q2", "none"): "Paris", ("Q3", "ab"): "London", ("Q4", "a"): "Berlin"}
    )
    items = [_item("1", "Q1"), _item("2", "Q2"), _item("3", "Q3"), _item("4", "Q4"), _item("5", "Q5")]
    tpl = load_prompt("multihop_ablation", "en")
    res = ablations.run_cascade(items, judge, tpl, order=("b", "ab", "none", "a"), lang="en")
    assert {k: v[:2] for k, v in res.outcome.items()} == {
        "1": ("dropped", "b_alone_suffices"),
        "2": ("dropped", "no_document_suffices"),
        "3": ("dropped", "ab_fails"),
        "4": ("dropped", "a_alone_not_impossible"),
        "5": ("kept", "passed_ablations"),
    }
    assert [r["asked"] for r in res.rounds] == [5, 4, 3, 2]
    assert res.judge_calls == len(judge.calls) == 14
    lenient = ablations.run_cascade(
        items, _judge({("Q4", "a"): "Berlin"}), tpl, lang="en", strict_impossible=False
    )
    assert lenient.outcome["4"][:2] == ("kept", "passed_ablations")
    other = ablations.run_cascade(
        items, _judge({("Q1", "b"): "Paris"}), tpl, order=("a", "none", "ab", "b"), lang="en"
    )
    assert other.rounds[0]["asked"] == 5 and other.rounds[-1]["asked"] == 5 and other.judge_calls == 20


def test_default_cascade_order_is_the_cards():
    # A+B, then B, then A, then none: the same failures as above stop at other rounds.
    judge = _judge({("Q1", "b"): "Paris", ("Q3", "ab"): "London", ("Q4", "a"): "Berlin", ("Q2", "none"): "x"})
    items = [_item("1", "Q1"), _item("2", "Q2"), _item("3", "Q3"), _item("4", "Q4"), _item("5", "Q5")]
    res = ablations.run_cascade(items, judge, load_prompt("multihop_ablation", "en"), lang="en")
    assert ablations.DEFAULT_ORDER == ("ab", "b", "a", "none")
    assert [r["asked"] for r in res.rounds] == [5, 4, 3, 2]  # Q3 stops at ab, Q1 at b, Q4 at a
    assert res.judge_calls == 14
    assert ablations.CARD_CALLS_PER_JUDGED == 2.10


def test_identical_prompts_are_sent_once_and_shared():
    judge = _judge({})
    items = [_item("1", "Same?"), _item("2", "Same?"), _item("3", "Other?")]
    res = ablations.run_cascade(items, judge, load_prompt("multihop_ablation", "en"), lang="en")
    assert res.judge_calls == len(judge.calls) == 8
    rows = res.verdicts.to_pylist()
    assert sum(r["shared"] for r in rows) == 4 and all(r["id"] == "2" for r in rows if r["shared"])
    assert ablations.judge_call_count(res.verdicts) == 8
    assert ablations.outcomes_from_verdicts(res.verdicts) == {q: ("kept", "passed_ablations") for q in "123"}


def test_bad_cascade_order_is_a_clear_error():
    with pytest.raises(ValueError, match="exactly once"):
        ablations.validate_order(["ab", "ab", "a", "b"])


def test_generation_unreadable_and_missing_slots_are_rows():
    pair = Pair("p", "a", "A", "b", "B", "B", "train")
    model = ScriptedChatModel(
        lambda m: '{"questions": [{"question": "q", "answer": "x", "support_a": [0], "support_b": [0]}]}'
    )
    from ragsft_assets.multihop.generation import SamplingParams, draft_json_schema

    DRAFT_JSON_SCHEMA = draft_json_schema(3, 10, 70)

    res = model.chat(
        [[{"role": "user", "content": "x"}]], SamplingParams(), json_schema=DRAFT_JSON_SCHEMA
    ).results[0]
    assert [r["status"] for r in draft_rows(pair, 3, res, "v")] == ["ok", "missing", "missing"]
    bad = (
        ScriptedChatModel(lambda m: "{oops")
        .chat([[{"role": "user", "content": "x"}]], SamplingParams(), json_schema=DRAFT_JSON_SCHEMA)
        .results[0]
    )
    rows = draft_rows(pair, 3, bad, "v")
    assert [r["status"] for r in rows] == ["unreadable"] * 3 and rows[0]["raw"] == "{oops"


def test_caps_near_duplicates_bridge_and_source_deterministic():
    cands = [
        caps.CapCandidate(
            f"q{i}", f"Where was the maker of thing {i % 2} founded?", "Paris", f"a{i // 4}", f"b{i // 3}"
        )
        for i in range(8)
    ]
    cands.append(caps.CapCandidate("dup", "where WAS the maker of thing 0 founded", "paris", "a9", "b9"))
    first = caps.apply_caps(cands, seed=7)
    assert first == caps.apply_caps(list(reversed(cands)), seed=7)
    assert sum(v == "kept" for v in first.values()) == 2  # only two distinct (question, answer) shapes
    distinct = [
        caps.CapCandidate(
            f"q{i}",
            f"question number {i} about things",
            f"ans{i}",
            "a0" if i < 5 else f"a{i}",
            "b0" if i < 3 else f"b{i}",
        )
        for i in range(8)
    ]
    decision = caps.apply_caps(distinct, seed=7)
    kept = [c for c in distinct if decision[c.id] == "kept"]
    assert sum(c.b_id == "b0" for c in kept) == 2 and sum(c.a_id == "a0" for c in kept) == 3
    assert (
        sorted(decision.values()).count("bridge_cap") == 1
        and sorted(decision.values()).count("source_cap") == 1
    )


@pytest.fixture(scope="module")
def hotpot_records():
    return json.loads(HOTPOT.read_text())


EXPECTED_HF = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("type", pa.string()),
        ("level", pa.string()),
        (
            "supporting_facts",
            pa.struct([("title", pa.list_(pa.string())), ("sent_id", pa.list_(pa.int32()))]),
        ),
        (
            "context",
            pa.struct([("title", pa.list_(pa.string())), ("sentences", pa.list_(pa.list_(pa.string())))]),
        ),
    ]
)


def test_real_hotpotqa_round_trip_and_schema(hotpot_records, tmp_path):
    hf = [hotpot_format.original_to_hf(r) for r in hotpot_records]
    assert hotpot_format.records_table(hf, with_split=False).schema == EXPECTED_HF
    assert (
        hotpot_format.MULTIHOP_SCHEMA.remove(hotpot_format.MULTIHOP_SCHEMA.get_field_index("split"))
        == EXPECTED_HF
    )
    assert [hotpot_format.hf_to_original(r) for r in hf] == hotpot_records
    path = hotpot_format.write_jsonl(hf, tmp_path / "train.jsonl")
    assert hotpot_format.read_jsonl(path) == hf
    for line, original in zip(path.read_bytes().splitlines(), hotpot_records, strict=True):
        assert list(orjson.loads(line)) == list(original)  # same keys, same order


def test_our_record_has_the_hotpotqa_shape(hotpot_records):
    d = [(f"D{i}", [f"Sentence {i}."]) for i in range(8)]
    rec = hotpot_format.build_record(
        "q" * 24, "Q?", "X", ("A", ["a0", "a1"]), ("B", ["b0"]), [1], [0], d, seed=1
    )
    assert rec == hotpot_format.build_record(
        "q" * 24, "Q?", "X", ("A", ["a0", "a1"]), ("B", ["b0"]), [1], [0], d, 1
    )
    original = hotpot_format.hf_to_original(rec)
    assert set(original) == set(hotpot_records[0])
    assert original["supporting_facts"] == [["A", 1], ["B", 0]]
    assert sorted(t for t, _ in original["context"]) == sorted(["A", "B", *[t for t, _ in d]])
    assert all(isinstance(v, type(hotpot_records[0][k])) for k, v in original.items())


def test_invariants_on_real_hotpotqa_and_on_broken_rows(hotpot_records):
    rows = [dict(hotpot_format.original_to_hf(r), split="train") for r in hotpot_records]
    results = {r.name: r.failures for r in audit.check_invariants(rows)}
    assert results["context_size"] == 0 and results["no_duplicate_document"] == 0
    assert results["golds_present"] == 0 and results["no_document_shared_between_splits"] == 0
    broken = dict(rows[0], split="test")
    titles = rows[0]["context"]["title"]
    broken["context"] = {
        "title": titles[:8] + titles[:1] + rows[1]["context"]["title"][:1],
        "sentences": rows[0]["context"]["sentences"][:9] + [[rows[0]["answer"]]],
    }
    gold_lost = int(not set(rows[0]["supporting_facts"]["title"]) <= set(broken["context"]["title"]))
    res = {r.name: r.failures for r in audit.check_invariants([rows[1], broken])}
    assert res == {
        "context_size": 0,
        "no_duplicate_document": 1,
        "golds_present": gold_lost,
        "answer_in_no_distractor": 1,
        "no_document_shared_between_splits": 1,
    }


def _synthetic_rows(n: int, bias: bool, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for q in range(n):
        paragraphs = []
        for p in range(10):
            length = rng.randint(20, 60) + (200 if bias and p < 2 else 0)
            paragraphs.append((f"T{q}_{p}", ["w" * length + "."] * rng.randint(1, 4)))
        rng.shuffle(paragraphs)
        golds = [f"T{q}_0", f"T{q}_1"]
        rows.append(
            {
                "id": str(q),
                "answer": "x",
                "split": "train",
                "supporting_facts": {"title": golds, "sent_id": [0, 0]},
                "context": {"title": [t for t, _ in paragraphs], "sentences": [s for _, s in paragraphs]},
            }
        )
    return rows


def test_surface_classifier_finds_a_planted_bias_and_not_noise():
    biased = _synthetic_rows(60, bias=True)
    auc, aucs = audit.surface_auc(*audit.paragraph_features(biased), repeats=5, seed=3)
    assert auc > 0.9 and len(aucs) == 5
    rate, chance = audit.gold_longest_rate(biased)
    assert rate == 1.0 and chance == pytest.approx(0.2)  # per question: one of the two golds is the longest
    x, y, g = audit.paragraph_features(_synthetic_rows(150, bias=True))
    shuffled = np.random.default_rng(0).permutation(y)
    auc_null, _ = audit.surface_auc(x, shuffled, g, repeats=5, seed=3)
    assert abs(auc_null - 0.5) < 0.08


def test_audit_on_real_hotpotqa(hotpot_records):
    rows = [
        dict(hotpot_format.original_to_hf(r), split="train") for r in hotpot_records if r["type"] == "bridge"
    ]
    auc, aucs = audit.surface_auc(*audit.paragraph_features(rows), repeats=5, seed=0)
    assert auc is not None and 0.3 < auc < 1.0 and len(aucs) == 5
    rate, chance = audit.gold_longest_rate(rows)
    assert 0.0 <= rate <= 1.0 and chance == pytest.approx(0.2)


def test_gold_longest_rate_is_per_question_against_golds_over_k():
    def row(lengths: list[int], golds: list[int]) -> dict:
        titles = [f"t{i}" for i in range(len(lengths))]
        return {
            "supporting_facts": {"title": [titles[g] for g in golds], "sent_id": [0] * len(golds)},
            "context": {"title": titles, "sentences": [["x" * n] for n in lengths]},
        }

    rows = [
        row([9, 1, 1, 1, 1], [0, 1]),  # a gold is the longest
        row([1, 9, 1, 1, 1], [0, 1]),  # the other gold is the longest: the question counts once
        row([1, 1, 9, 1, 1], [0, 1]),  # a distractor is the longest
        row([1, 1, 1, 1, 9], [0, 1]),
    ]
    rate, chance = audit.gold_longest_rate(rows)
    assert rate == 0.5 and chance == pytest.approx(2 / 5)
    assert audit.gold_longest_rate([]) == (None, None)


def test_in_degree_map_from_the_link_graph():
    import pyarrow as pa

    graph = pa.table({"target_title": ["A", "B"], "target_in_degree": [3, None]})
    assert audit.in_degree_map(graph) == {"A": 3, "B": 0}
    assert audit.in_degree_map(None) == {}


def test_drafts_and_ablations_run_without_thinking_by_default() -> None:
    """The card writes and judges without thinking: the tasks' defaults say so (a role's own
    RAGSFT_<ROLE>_ENABLE_THINKING still wins in the client)."""
    from ragsft_assets.multihop import ablations, generation

    assert generation.GENERATION_PARAMS.enable_thinking is False
    assert ablations.JUDGE_PARAMS.enable_thinking is False


def test_normalize_text_per_character_is_the_rule_on_the_whole_text():
    # normalize_text maps each character through a cached table (str.translate): the rule as
    # written on the whole text is the oracle, over real sample text and random code points
    # (accents, combining runs, Hangul, full-width and mathematical forms, punctuation, symbols).
    import unicodedata

    from ragsft_assets.multihop.normalize import ARTICLES

    def rule(text: str, drop_articles: bool) -> str:
        text = "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c))
        text = "".join(" " if unicodedata.category(c)[0] in "PS" else c for c in text)
        return " ".join(t for t in text.split() if not (drop_articles and t in ARTICLES))

    rng = random.Random(7)
    ranges = [
        (0x20, 0x250),
        (0x300, 0x370),
        (0x370, 0x3000),
        (0xAC00, 0xD7A4),
        (0xFF00, 0xFFEF),
        (0x1D400, 0x1D800),
    ]
    texts = [
        "L'Été à Málaga — « İstanbul », ﬁn, Ⅻ, ½, x², Œuvre; l'an 2000!",
        "e\u0301\u0327 a\u0308\u0301 \u1100\u1161\u11a8 한국어 ＡＢＣ１２３ 𝐀𝐁𝐂",
        *(
            "".join(chr(rng.randrange(*rng.choice(ranges))) for _ in range(rng.randrange(1, 30)))
            for _ in range(3000)
        ),
    ]
    for text in texts:
        for drop in (True, False):
            assert normalize_text(text, drop) == rule(text, drop), text


def test_paragraph_densities_are_the_per_character_rule():
    # digit_density and punct_density count through str methods mapped over the text: the rule
    # per character (a digit; neither alphanumeric nor a space) is the oracle.
    texts = ["Né en 1984 à Lyon, il « gagne » 3 prix !", "x² ½ ٣ — 𝟙 ok", "   ", ""]
    row = {
        "id": "q",
        "answer": "x",
        "split": "train",
        "supporting_facts": {"title": ["A", "B"], "sent_id": [0, 0]},
        "context": {"title": ["A", "B", "C", "D"], "sentences": [[t] for t in texts]},
    }
    x, _, _ = audit.paragraph_features([row])
    digit, punct = audit.FEATURES.index("digit_density"), audit.FEATURES.index("punct_density")
    for i, t in enumerate(texts):
        n = max(len(t), 1)
        assert x[i, digit] == pytest.approx(sum(c.isdigit() for c in t) / n)
        assert x[i, punct] == pytest.approx(sum((not c.isalnum()) and not c.isspace() for c in t) / n)
