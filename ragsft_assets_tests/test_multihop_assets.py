"""The multihop assets end to end on a scripted corpus and scripted models: funnel, ledger, reruns."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import dagster as dg
import duckdb
import orjson
import pyarrow as pa
import pytest

from ragsft_assets.corpus.abstracts import ABSTRACTS_SCHEMA
from ragsft_assets.defs.multihop import multihop_assets
from ragsft_assets.ids import derived_id, doc_id
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.llm_double import ScriptedChatModel

PARTITION = "test.en"
SPLIT_OF = {i: "train" for i in range(10)} | {10: "validation", 11: "validation", 12: "test"}
FILLERS = {"train": 12, "validation": 10, "test": 4}
SOURCE_OF = {i: f"Source{i:02d}" for i in range(13)} | {6: "Source05"}  # pairs 5 and 6 share a source
EXTRA_B = {
    2: "It sells tools, toys and garden furniture across many countries of the whole wide world.",
    6: "It makes cars, bikes and boats.",
}


def _b_sentences(i: int) -> list[str]:
    s = [
        f"Bridge{i:02d} is a company.",
        f"It was founded in Town{i:02d} in {1900 + i}.",
        f"Its founder was Person{i:02d}.",
    ]
    return s + ([EXTRA_B[i]] if i in EXTRA_B else [])


def _a_sentences(title: str) -> list[str]:
    made = [i for i, s in SOURCE_OF.items() if s == title]
    return [f"{title} is a product."] + [f"It is made by Bridge{i:02d}." for i in made]


def _questions(i: int) -> list[tuple[str, str, list[int], list[int]]]:
    """The drafts the scripted generator writes for pair i: (question, answer, support_a, support_b)."""
    src, role = SOURCE_OF[i], "seller" if i == 6 else "maker"
    good = [
        (f"In which town was the {role} of {src} founded?", f"Town{i:02d}", [1], [1]),
        (f"In which year was the {role} of {src} founded?", f"{1900 + i}", [1], [1]),
        (f"Who founded the {role} of {src}?", f"Person{i:02d}", [1], [2]),
    ]
    bad = {
        0: (good[2][0], "Atlantis", [1], [2]),  # answer_not_in_b
        1: (f"Where was Bridge{i:02d} founded?", f"Town{i:02d}", [1], [1]),  # question_names_bridge
        # an answer over 10 words or 70 characters no longer gets through: the generation's JSON
        # schema carries the bound (test_multihop_logic), so this one is another enumeration
        2: ("What does it sell?", "tools, toys and garden furniture", [1], [3]),  # answer_enumeration
        5: (good[2][0], good[2][1], [1], [7]),  # support_out_of_bounds
        6: ("What does it make?", "cars, bikes and boats", [1], [3]),  # answer_enumeration
        7: ("What happened?", f"It was founded in Town{i:02d}", [1], [1]),  # answer_is_clause
        8: (good[0][0].replace("?", " ?!"), good[0][1], [1], [1]),  # near duplicate of draft 0
        9: (good[2][0], good[2][1], [], [2]),  # support_missing
        10: good[0],  # identical to draft 0: one judge call per ablation for both
        12: ("", "Town12", [1], [1]),  # empty_question_or_answer
    }
    drafts = [good[0], good[1], bad.get(i, good[2])]
    if i == 9:
        drafts[1] = (f"Was the maker of {src} founded in Town09?", "Town09", [1], [1])  # answer_in_question
    return drafts


QUESTIONS = {q: (i, d, a) for i in range(13) for d, (q, a, _, _) in enumerate(_questions(i)) if q}


def generator_responder(messages) -> str:
    text = messages[-1]["content"]
    i = int(re.search(r"Document B: Bridge(\d+)", text).group(1))
    if i == 3:
        return "I cannot do that."  # unreadable
    qs = _questions(i)[:1] if i == 4 else _questions(i)  # pair 4: only one question
    items = [{"question": q, "answer": a, "support_a": sa, "support_b": sb} for q, a, sa, sb in qs]
    return orjson.dumps({"questions": items}).decode()


JUDGE_FAILS = {  # (pair, draft, ablation) -> reply; everything else answers as an ideal judge
    (0, 0, "b"): "GOLD",
    (0, 1, "b"): "GOLD",
    (2, 0, "ab"): "IMPOSSIBLE",
    (7, 1, "none"): "GOLD",
    (1, 0, "a"): "GOLD",
    (9, 0, "a"): "",  # empty -> unreadable
}


FIRST_HOP_REPLIES = {  # (pair, draft) -> first_hop reply; else the judge names the bridge
    (4, 0): {"entity": "Town04", "status": "one"},
    (5, 1): {"entity": None, "status": "several"},
    (11, 1): {"entity": None, "status": "none"},
}


TARGETED_FAILS = {(11, 1): ("b_only_candidate", False), (6, 0): ("no_meta_wording", False)}


def targeted_reply(text: str) -> str:
    i, d, _ = QUESTIONS[re.search(r"Question: (.*)\n", text).group(1)]
    if '"b_only_candidate"' in text:
        reply = {"analysis": "a", "descriptor": "d", "candidates": ["x"], "b_only_candidate": True}
        reply.update({"a_states_relation": True, "question_names_b": False})
    else:
        reply = {"analysis": "a", "fluent": True, "unique_referents": True, "no_meta_wording": True}
        reply["answer_type_and_scope"] = True
    field, value = TARGETED_FAILS.get((i, d), (None, None))
    if field in reply:
        reply[field] = value
    return orjson.dumps(reply).decode()


def judge_responder(messages) -> str:
    text = messages[-1]["content"]
    if '"publishability"' in text:  # publishability_score (train): publishable as it is
        return orjson.dumps({"analysis": "a", "publishability": 5}).decode()
    if '"descriptor_in_question"' in text:  # descriptor_check (train)
        checks = ("descriptor_in_question", "descriptor_hides_bridge", "descriptor_stated_by_a")
        return orjson.dumps({"analysis": "a", **dict.fromkeys(checks, True)}).decode()
    if '"b_only_candidate"' in text or '"no_meta_wording"' in text:  # bridge_judge, language_judge
        return targeted_reply(text)
    if "points to an entity" in text:  # first_hop: A alone, name the entity
        i, d, _ = QUESTIONS[re.search(r"Question: (.*)\n", text).group(1)]
        if (i, d) == (8, 1):
            return "no idea"  # unreadable
        reply = FIRST_HOP_REPLIES.get((i, d), {"entity": f"bridge{i:02d}", "status": "one"})
        return orjson.dumps(reply).decode()
    question = re.search(r"Question: (.*)\nAnswer:", text).group(1)
    titles = re.findall(r"Document \d+: (\S+)", text)
    kind = {2: "ab", 0: "none"}.get(len(titles)) or ("a" if titles[0].startswith("Source") else "b")
    i, d, gold = QUESTIONS[question]
    reply = JUDGE_FAILS.get((i, d, kind), "GOLD" if kind == "ab" else "IMPOSSIBLE")
    return gold if reply == "GOLD" else reply


CRITERIA_FAILS = {  # (pair, draft) -> criteria that do not hold; (8, 1) replies unreadably
    (4, 0): ["clear_question"],
    (5, 1): ["correct_answer", "minimal_answer"],
}
CRITERIA = [
    "correct_answer",
    "bridge_in_a",
    "fact_in_b",
    "both_documents_needed",
    "clear_question",
    "minimal_answer",
]


def annotator_responder(messages) -> str:
    text = messages[-1]["content"]
    i, d, _ = QUESTIONS[re.search(r"Question: (.*)\n", text).group(1)]
    if (i, d) == (8, 1):
        return '{"correct_answer": "yes"}'  # not the six booleans: not_annotated
    fails = CRITERIA_FAILS.get((i, d), [])
    return orjson.dumps({c: c not in fails for c in CRITERIA}).decode()


def _doc_row(title: str, sentences: list[str], split: str) -> dict:
    return {
        "id": doc_id(title),
        "title": title,
        "identifier": int(doc_id(title)[:8], 16),
        "url": f"https://en.wikipedia.org/wiki/{title}",
        "revision": 1,
        "qid": None,
        "text": " ".join(sentences),
        "sentences": sentences,
        "links": [],
        "split": split,
    }


def write_corpus(store: ArtifactStore, partition: str = PARTITION) -> None:
    """abstracts / link_graph / bridge_pairs tables following the corpus contract."""
    docs, pairs, edges = {}, [], []
    for i, split in SPLIT_OF.items():
        a_title, b_title = SOURCE_OF[i], f"Bridge{i:02d}"
        docs[a_title] = _doc_row(a_title, _a_sentences(a_title), split)
        docs[b_title] = _doc_row(b_title, _b_sentences(i), split)
        a_id, b_id = doc_id(a_title), doc_id(b_title)
        sentence = 1 + [k for k, s in SOURCE_OF.items() if s == a_title].index(i)
        pairs.append(
            {
                "id": derived_id("bridge_pair", a_id, b_id),
                "a_id": a_id,
                "a_title": a_title,
                "b_id": b_id,
                "b_title": b_title,
                "alias": b_title,
                "a_sentence": sentence,
                "split": split,
                "draw": i,  # bridge_pairs' seeded order: pair i drawn i-th
            }
        )
        edges.append(
            {
                "source_id": a_id,
                "source_title": a_title,
                "target_id": b_id,
                "target_title": b_title,
                "alias": b_title,
                "sentence": sentence,
                "sentence_text": docs[a_title]["sentences"][sentence],
                "split": split,
                "target_in_degree": 1,
                "is_bridge": True,
            }
        )
    words = ["river", "mountain", "history", "music", "garden", "forest", "painter", "valley", "harbour"]
    for split, n in FILLERS.items():
        for j in range(n):
            title = f"Filler{split[:2]}{j:02d}"
            docs[title] = _doc_row(
                title,
                [
                    f"{title} is a place about {words[j % 9]} and the town founded by locals.",
                    f"The maker of {words[(j + 3) % 9]} lives there.",
                ],
                split,
            )
    schema = ABSTRACTS_SCHEMA
    store.write_splits(
        pa.Table.from_pylist(sorted(docs.values(), key=lambda r: r["id"]), schema=schema),
        partition,
        "abstracts",
    )
    store.write(pa.Table.from_pylist(sorted(pairs, key=lambda r: r["id"])), partition, "bridge_pairs")
    edges.sort(key=lambda r: (r["source_id"], r["target_id"], r["sentence"]))
    store.write(
        pa.Table.from_pylist(edges).cast(
            pa.Table.from_pylist(edges)
            .schema.set(5, pa.field("sentence", pa.int32()))
            .set(8, pa.field("target_in_degree", pa.int32()))
        ),
        partition,
        "link_graph",
    )


# Topic categories of the bridges (the snapshot's topics.tsv); Bridge11 and Bridge12 have none.
TOPICS = {f"Bridge{i:02d}": ("Industry" if i < 6 else "Trade") for i in range(11)}


def materialize(home: Path, run_config: dict | None = None):
    store = ArtifactStore(home=str(home))
    write_corpus(store)
    topics = home / "snapshots" / PARTITION / "topics.tsv"
    topics.parent.mkdir(parents=True, exist_ok=True)
    topics.write_text(
        "# title\ttopic\n" + "".join(f"{t}\t{c}\n" for t, c in TOPICS.items()), encoding="utf-8"
    )
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    generator, judge = ScriptedChatModel(generator_responder), ScriptedChatModel(judge_responder)
    upstream = [dg.AssetSpec(k) for k in ("abstracts", "bridge_pairs", "link_graph")]
    result = dg.materialize(
        [*multihop_assets, *upstream],
        resources={
            "store": store,
            "snapshots": SnapshotSource(home=str(home)),
            "generator": generator,
            "judge": judge,
            "annotator": ScriptedChatModel(annotator_responder),
        },
        partition_key=PARTITION,
        instance=instance,
        run_config=run_config,
        selection=[a.key for a in multihop_assets],
    )
    return result, store, generator, judge


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return materialize(tmp_path_factory.mktemp("home"))


def _metadata(result, asset: str) -> dict:
    mats = result.asset_materializations_for_node(asset)
    return {k: v.value for k, v in mats[0].metadata.items()}


def test_funnel_exact_counts(run):
    result, store, generator, judge = run
    assert result.success
    funnel = _metadata(result, "multihop_questions")["funnel_json"]
    expected = {
        "pairs drawn": 13,
        "draft slots": 39,
        "generation unreadable": 3,
        "generation missing": 2,
        "questions generated": 34,
        "dropped: empty_question_or_answer": 1,
        "dropped: answer_not_in_b": 1,
        "dropped: question_names_bridge": 1,
        "dropped: answer_in_question": 1,
        "dropped: support_out_of_bounds": 1,
        "dropped: support_missing": 1,
        "dropped: answer_too_long": 0,  # the generation's JSON schema bounds the answer
        "dropped: answer_enumeration": 2,
        "dropped: answer_is_clause": 1,
        "dropped: too_few_distractors": 2,
        # before the judge, as the card's arithmetic requires: the near duplicates (pair 8's " ?!"
        # variant, pair 10's identical draft), pair 11's third question, pair 6 (source of 5 and 6)
        "dropped: near_duplicate": 2,
        "dropped: bridge_cap": 1,
        "dropped: source_cap": 1,
        "dropped: over_judge_limit": 0,
        "dropped before judge": 15,
        "judged": 19,
        "rejected: ab_fails": 1,
        "rejected: a_alone_suffices": 1,
        "rejected: b_alone_suffices": 2,
        "rejected: no_document_suffices": 1,
        "rejected: a_alone_not_impossible": 0,
        "rejected: b_alone_not_impossible": 0,
        "rejected: no_document_not_impossible": 0,
        "rejected: judge_unreadable": 1,
        "kept": 13,
        # the card's order ab, b, a, none: 19 asked, then 18, 16, 14 (the identical draft never
        # reaches the judge: it is a near duplicate)
        "judge calls: ab": 19,
        "judge calls: b": 18,
        "judge calls: a": 16,
        "judge calls: none": 14,
        "judge calls": 19 + 18 + 16 + 14,
        "plain 4-call run calls": 76,
        "judge calls per judged question": round(67 / 19, 3),
        "card judge calls per judged question": 2.1,  # 590,596 / 281,119
    }
    assert funnel == expected
    # the ablations, one first_hop call per released question, bridge_judge on the 10 of filtered_qwen,
    # language_judge on the 9 bridge_judge keeps, publishability_score then descriptor_check on the
    # 5 train questions of its 8 keeps ("(train)" in the card)
    assert len(judge.calls) == 67 + 13 + 10 + 9 + 5 + 5
    assert len(generator.calls) == 13
    rows = store.read(PARTITION, "multihop_questions")
    assert rows.num_rows == 13
    splits = rows["split"].to_pylist()
    # validation: pair 10 keeps 2 of 3 (near duplicate), pair 11 keeps 2 of 3 (bridge cap)
    assert (splits.count("train"), splits.count("validation"), splits.count("test")) == (9, 4, 0)


def test_ledger_rows_per_stage_queryable_with_duckdb(run):
    _, store, _, _ = run
    folder = store.root / PARTITION / "_ledger"
    con = duckdb.connect()
    rows = con.execute(
        f"SELECT stage, verdict, count(*) FROM read_parquet('{folder}/*.parquet') GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    assert rows == [
        ("ablation_verdicts", "dropped", 5),
        ("ablation_verdicts", "kept", 13),
        ("ablation_verdicts", "unreadable", 1),
        ("bridge_judge", "dropped", 1),
        ("bridge_judge", "kept", 9),
        ("criteria_annotation", "dropped", 3),
        ("criteria_annotation", "kept", 10),
        ("descriptor_check", "kept", 5),
        ("distractors", "dropped", 6),  # 2 too few distractors, 2 near duplicates, 2 caps
        ("distractors", "kept", 19),
        ("first_hop", "dropped", 4),
        ("first_hop", "kept", 9),
        ("language_judge", "dropped", 1),
        ("language_judge", "kept", 8),
        ("mechanical_rules", "kept", 9),
        ("multihop_questions", "kept", 13),
        ("publishability_score", "kept", 5),
        ("question_checks", "dropped", 9),
        ("question_checks", "kept", 25),
        ("question_drafts", "dropped", 2),
        ("question_drafts", "kept", 34),
        ("question_drafts", "unreadable", 3),
    ]
    # every candidate's final verdict: the last stage that decided it
    final = con.execute(
        f"""SELECT verdict, count(*) FROM (
              SELECT candidate_id, arg_max(verdict, CASE stage WHEN 'question_drafts' THEN 1 WHEN 'question_checks'
                THEN 2 WHEN 'distractors' THEN 3 WHEN 'ablation_verdicts' THEN 4 ELSE 5 END) AS verdict
              FROM read_parquet('{folder}/*.parquet') WHERE product = 'multihop' GROUP BY 1) GROUP BY 1 ORDER BY 1"""
    ).fetchall()
    assert final == [("dropped", 22), ("kept", 13), ("unreadable", 4)]


def test_verdicts_keep_raw_text_and_caps_run_before_the_judge(run):
    _, store, _, _ = run
    v = store.read(PARTITION, "ablation_verdicts").to_pylist()
    assert len(v) == 19 + 18 + 16 + 14
    assert sum(not r["shared"] for r in v) == 67  # pair 10's identical draft was removed before
    unreadable = [r for r in v if r["outcome"] == "unreadable"]
    assert len(unreadable) == 1 and unreadable[0]["raw"] == "" and unreadable[0]["ablation"] == "a"
    assert {r["raw"] for r in v if r["ablation"] == "b" and r["outcome"] == "pass"} == {"IMPOSSIBLE"}
    # no capped question was judged, and every question the judge kept is released
    dist = store.read(PARTITION, "distractors").to_pylist()
    capped = {r["id"] for r in dist if r["reason"] in ("near_duplicate", "bridge_cap", "source_cap")}
    assert len(capped) == 4 and not capped & {r["id"] for r in v}
    ledger = store.read(PARTITION, "_ledger", "ablation_verdicts").to_pylist()
    kept = {r["candidate_id"] for r in ledger if r["verdict"] == "kept"}
    assert kept == set(store.read(PARTITION, "multihop_questions")["id"].to_pylist())


def test_invariant_checks_pass_and_audit_runs(run):
    result, store, _, _ = run
    checks = result.get_asset_check_evaluations()
    # the five invariants of multihop_questions and the subset checks of the three filtered configs
    assert len(checks) == 8 and all(c.passed for c in checks)
    audit = store.read(PARTITION, "multihop_audit").to_pylist()
    assert [r["measure"] for r in audit][:5] == [
        "invariant:context_size",
        "invariant:no_duplicate_document",
        "invariant:golds_present",
        "invariant:answer_in_no_distractor",
        "invariant:no_document_shared_between_splits",
    ]
    assert all(r["ok"] for r in audit[:5])
    jsonl = store.path(PARTITION, "multihop_questions", "validation").with_suffix(".jsonl")
    recs = [orjson.loads(line) for line in jsonl.read_bytes().splitlines()]
    assert len(recs) == 4 and all(len(r["context"]) == 10 for r in recs)


def test_rerun_is_byte_identical(run, tmp_path):
    _, store, _, _ = run
    _, store2, _, _ = materialize(tmp_path)
    for asset in (
        "question_drafts",
        "question_checks",
        "distractors",
        "ablation_verdicts",
        "multihop_questions",
        "multihop_audit",
        "_ledger",
    ):
        first = sorted((store.root / PARTITION / asset).iterdir())
        second = sorted((store2.root / PARTITION / asset).iterdir())
        assert [p.name for p in first] == [p.name for p in second]
        for a, b in zip(first, second, strict=True):
            assert a.read_bytes() == b.read_bytes(), a


def _unreadable_run(home: Path, snapshot_settings: dict | None = None):
    store = ArtifactStore(home=str(home))
    write_corpus(store)
    if snapshot_settings is not None:
        folder = home / "snapshots" / PARTITION
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "snapshot.json").write_bytes(orjson.dumps(snapshot_settings))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    garbage = ScriptedChatModel(lambda m: "<think>hmm")  # unclosed think block: empty answer
    result = dg.materialize(
        [*multihop_assets, *[dg.AssetSpec(k) for k in ("abstracts", "bridge_pairs", "link_graph")]],
        resources={
            "store": store,
            "snapshots": SnapshotSource(home=str(home)),
            "generator": garbage,
            "judge": garbage,
            "annotator": garbage,
        },
        partition_key=PARTITION,
        instance=instance,
        selection=[a.key for a in multihop_assets],
        raise_on_error=False,
    )
    checks = [c for c in result.get_asset_check_evaluations() if c.asset_key.path[-1] == "multihop_questions"]
    return result, store, checks


def test_all_unreadable_models_record_verdicts_not_crash(tmp_path):
    """Every reply unreadable: recorded verdicts, no crash, and no question released from 39 draft
    slots. Empty data is no pass: the five blocking invariant checks fail and say why."""
    result, store, checks = _unreadable_run(tmp_path)
    funnel = _metadata(result, "multihop_questions")["funnel_json"]
    assert funnel["generation unreadable"] == 39 and funnel["judged"] == 0 and funnel["kept"] == 0
    ledger = store.read(PARTITION, "_ledger", "question_drafts")
    assert set(ledger["verdict"].to_pylist()) == {"unreadable"}
    assert len(checks) == 5 and not any(c.passed for c in checks)
    assert {c.severity for c in checks} == {dg.AssetCheckSeverity.ERROR}
    for c in checks:
        md = {k: v.value for k, v in c.metadata.items()}
        assert md["questions"] == 0 and md["inputs"] == 39 and md["allow_empty_output"] is False
        assert md["empty_output"].startswith("multihop_questions produced no row from 39 draft slots")
        assert "not allowed" in c.description
    assert not result.success  # the blocking checks stop the run: nothing downstream of no data


def test_empty_output_warns_where_the_snapshot_allows_it(tmp_path):
    """The demo's case: snapshot.json's allow_empty_output turns the empty release into warnings
    (WARN), which say so, and the run goes on."""
    result, _, checks = _unreadable_run(tmp_path, {"allow_empty_output": True})
    assert len(checks) == 5 and not any(c.passed for c in checks)
    assert {c.severity for c in checks} == {dg.AssetCheckSeverity.WARN}
    assert all("allowed by allow_empty_output" in c.description for c in checks)
    assert result.success


def test_cascade_order_and_judge_limit_from_config(tmp_path):
    config = {"order": ["a", "none", "ab", "b"], "max_judged": 10}
    ops = {
        name: {
            "config": {"overrides": {"cascade_order": config["order"]}, "max_judged": config["max_judged"]}
        }
        for name in (
            "question_drafts",
            "distractors",
            "ablation_verdicts",
            "multihop_questions",
            "multihop_audit",
        )
    }
    ops["first_hop"] = {"config": {"overrides": {"first_hop_role": "annotator"}}}
    result, store, _, judge = materialize(tmp_path, {"ops": ops})
    funnel = _metadata(result, "multihop_questions")["funnel_json"]
    assert funnel["judged"] == 10 and funnel["dropped: over_judge_limit"] == 9  # 19 ready
    # first_hop ran on the annotator role: the judge got none of its calls, and the annotator's
    # six-criteria replies are not first-hop answers
    assert not any("points to an entity" in c[-1]["content"] for c in judge.calls)
    assert set(store.read(PARTITION, "first_hop")["verdict"].to_pylist()) == {"unreadable"}
    assert _metadata(result, "first_hop")["first_hop/role"] == "annotator"
    filters = ("points to an entity", '"b_only_candidate"', '"no_meta_wording"', '"publishability"')
    filters += ('"descriptor_in_question"',)  # not ablation calls
    ablation_calls = [c for c in judge.calls if not any(f in c[-1]["content"] for f in filters)]
    assert funnel["judge calls"] == len(ablation_calls)
    first_round = {
        r["ablation"] for r in store.read(PARTITION, "ablation_verdicts").to_pylist() if r["round"] == 0
    }
    assert first_round == {"a"}
    # the recipe the run applied, with the fields it changed, beside the files and in the metadata
    rec = orjson.loads((store.root / PARTITION / "ablation_verdicts" / "_recipe.json").read_bytes())
    assert rec["recipe"] == "default" and rec["changed"] == {
        "cascade_order": {"card": ["ab", "b", "a", "none"], "run": ["a", "none", "ab", "b"]}
    }
    assert _metadata(result, "ablation_verdicts")["recipe"] == rec
    fh_rec = _metadata(result, "first_hop")["recipe"]
    assert fh_rec["recipe"] == "filtered" and list(fh_rec["changed"]) == ["first_hop_role"]


def test_every_asset_applies_its_configs_recipe_as_the_card(run):
    result, store, _, _ = run
    expected = {
        "question_drafts": "default", "question_checks": "default", "distractors": "default",
        "ablation_verdicts": "default", "multihop_questions": "default", "multihop_audit": "default",
        "first_hop": "filtered", "criteria_annotation": "filtered_qwen", "bridge_judge": "filtered_qwen_v2",
        "language_judge": "filtered_qwen_v2", "corpus_filtered_qwen_v2": "corpus_filtered_qwen_v2",
    }  # fmt: skip
    for asset, name in expected.items():
        rec = orjson.loads((store.root / PARTITION / asset / "_recipe.json").read_bytes())
        assert (rec["recipe"], rec["changed"]) == (name, {}), asset
        assert _metadata(result, asset)["recipe_card"] == f"Recipe `{name}`: as the card."


def test_every_multihop_asset_has_a_description():
    for a in multihop_assets:
        description = a.descriptions_by_key.get(a.key) or ""
        assert len(description) > 40, a.key  # bridge_judge and language_judge had none


def test_first_hop_and_mechanical_rules_funnel_adds_up(run):
    result, store, _, judge = run
    released = store.read(PARTITION, "multihop_questions").num_rows
    fh = Counter(store.read(PARTITION, "first_hop").column("verdict").to_pylist())
    assert fh == {
        "leads_to_b": released - 4,
        "other_entity": 1,
        "several_entities": 1,
        "a_lacks_property": 1,
        "unreadable": 1,
    }
    md = _metadata(result, "first_hop")
    assert md["judged"] == released and md["kept"] == fh["leads_to_b"]
    mech = store.read(PARTITION, "mechanical_rules")
    assert mech.num_rows == fh["leads_to_b"]  # exactly what first_hop keeps
    assert set(mech.column("verdict").to_pylist()) == {"kept"}  # year questions answered by one year
    for stage, rows in (("first_hop", released), ("mechanical_rules", mech.num_rows)):
        ledger = store.read(PARTITION, "_ledger", stage).to_pylist()
        assert len(ledger) == rows and len({r["candidate_id"] for r in ledger}) == rows
    dropped = [r for r in store.read(PARTITION, "_ledger", "first_hop").to_pylist() if r["verdict"] != "kept"]
    assert sorted(r["reason"] for r in dropped) == sorted(
        ["other_entity", "several_entities", "a_lacks_property", "unreadable"]
    )


def test_filtered_config_is_byte_identical_subset_and_loads(run, tmp_path, monkeypatch):
    import datasets
    import pyarrow.parquet as pq

    from ragsft_assets.multihop.filter_configs import subset_violations
    from ragsft_assets.release.build import build_release, write_card

    result, store, _, _ = run
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["is_subset_of_default"] is True
    kept = {r["id"] for r in store.read(PARTITION, "mechanical_rules").to_pylist() if r["verdict"] == "kept"}
    total = 0
    for split in ("train", "validation", "test"):
        parent = store.read(PARTITION, "multihop_questions", split)
        child = store.read(PARTITION, "multihop_filtered", split)
        assert subset_violations(child, parent) == []
        assert set(child["id"].to_pylist()) == kept & set(parent["id"].to_pylist())
        total += child.num_rows
    assert total == len(kept) == 9  # 13 released, 4 dropped by first_hop, none by the rules
    # funnel: default -> first_hop kept -> mechanical_rules kept
    assert "| default | 13 |" in _metadata(result, "multihop_filtered")["funnel"]
    folder = tmp_path / "release"
    build_release(store.root, PARTITION, folder)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    ds = datasets.load_dataset(str(folder), "filtered", cache_dir=str(tmp_path / "hf"))
    default = datasets.load_dataset(str(folder), "default", cache_dir=str(tmp_path / "hf"))
    for split in ds:
        rows = {r["_id"]: r for r in default[split]}  # the card's key (001, Schéma)
        assert all(rows[r["_id"]] == r for r in ds[split])  # row for row, every field
    assert sum(ds[s].num_rows for s in ds) == 9
    body, _ = write_card(folder, PARTITION, {"gold_longest_rate": 0.1})
    assert (
        "| first_hop | leads_to_b | kept | 9 |" in body and "| mechanical_rules | kept | kept | 9 |" in body
    )
    assert "| first_hop | unreadable | dropped | 1 |" in body and "(chance: 2/k" in body
    # keep rate by topic (the bridge's category, from the snapshot's topics.tsv), counted from the store
    b_of = {d["id"]: d["b_title"] for d in store.read(PARTITION, "question_drafts").to_pylist()}
    released = store.read(PARTITION, "multihop_questions")["id"].to_pylist()
    for topic in ("Industry", "Trade"):
        ids = [i for i in released if TOPICS.get(b_of[i]) == topic]
        k = sum(i in kept for i in ids)
        assert f"| {topic} | {k} | {len(ids)} | {round(k / len(ids), 4)} |" in body, body
    unknown = sum(b_of[i] not in TOPICS for i in released)
    assert unknown and f"{unknown} questions have no known topic." in body
    verdicts = pq.read_table(folder / "provenance" / "filtered" / "verdicts.parquet").to_pylist()
    by_filter = Counter((v["filter"], v["kept"]) for v in verdicts)
    assert by_filter == {("first_hop", True): 9, ("first_hop", False): 4, ("mechanical_rules", True): 9}
    assert {v["verdict"] for v in verdicts if not v["kept"]} == {
        "other_entity", "several_entities", "a_lacks_property", "unreadable"
    }  # fmt: skip


def test_subset_violations_catch_changed_extra_and_duplicate_rows(run):
    from ragsft_assets.multihop.filter_configs import subset_violations

    _, store, _, _ = run
    parent = store.read(PARTITION, "multihop_questions", "train")
    child = parent.slice(0, 3)
    assert subset_violations(child, parent) == []
    changed = child.set_column(
        child.schema.get_field_index("answer"), "answer", pa.array(["x", *child["answer"].to_pylist()[1:]])
    )
    first = child["id"][0].as_py()
    assert subset_violations(changed, parent) == [("row_differs", first)]
    assert subset_violations(pa.concat_tables([child, child.slice(0, 1)]), parent) == [
        ("duplicate_id", first)
    ]
    other = store.read(PARTITION, "multihop_questions", "validation").slice(0, 1)
    assert subset_violations(other, parent) == [("not_in_parent", other["id"][0].as_py())]
    assert subset_violations(child.drop_columns(["answer"]), parent) == [("schema", "")]


def test_v2_check_compares_with_filtered_qwen_not_default(run, tmp_path):
    import shutil

    import pyarrow.compute as pc

    from ragsft_assets.defs.multihop.filters import CONFIG_ASSETS, subset_check_result

    [spec] = CONFIG_ASSETS["filtered_qwen_v2"].check_specs  # the check the asset computes as it is written
    assert spec.name == "is_subset_of_filtered_qwen"

    def check(_context, store):
        return subset_check_result(store, PARTITION, "multihop_filtered_qwen_v2", "multihop_filtered_qwen")

    _, store, _, _ = run
    shutil.copytree(store.home_path / "assets", tmp_path / "assets")
    copy = ArtifactStore(home=str(tmp_path))
    context = dg.build_op_context(partition_key=PARTITION)  # direct invocation of the check
    assert check(context, store=copy).passed
    qwen = pa.array(sorted(set(copy.read(PARTITION, "multihop_filtered_qwen")["id"].to_pylist())))
    parent = copy.read(PARTITION, "multihop_questions", "train")
    rejected = parent.filter(pc.invert(pc.is_in(parent["id"], value_set=qwen)))
    assert rejected.num_rows  # a row of default that filtered_qwen rejected, put into v2
    v2 = copy.read(PARTITION, "multihop_filtered_qwen_v2", "train")
    copy.write(pa.concat_tables([v2, rejected.slice(0, 1)]), PARTITION, "multihop_filtered_qwen_v2", "train")
    result = check(context, store=copy)
    assert not result.passed and result.metadata["parent"].value == "multihop_filtered_qwen"
    assert result.metadata["examples"].value == [["not_in_parent", rejected["id"][0].as_py()]]


def test_criteria_annotation_gives_filtered_qwen(run, tmp_path, monkeypatch):
    import datasets
    import pyarrow.parquet as pq

    from ragsft_assets.multihop.filter_configs import subset_violations
    from ragsft_assets.release.build import build_release, write_card

    result, store, _, _ = run
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["matches_default_on_shared_ids"] is True
    rows = store.read(PARTITION, "criteria_annotation").to_pylist()
    assert Counter(r["verdict"] for r in rows) == {"kept": 10, "fails_criteria": 2, "not_annotated": 1}
    md = _metadata(result, "criteria_annotation")
    # the funnel adds up; not_annotated is apart from the rejected
    assert md["kept"] + md["rejected"] + md["not_annotated"] == md["questions"] == 13
    assert md["rejected"] == 2 and md["not_annotated"] == 1 and md["annotated"] == 12
    assert md["failure_share/clear_question"] == round(1 / 12, 4)
    ledger = store.read(PARTITION, "_ledger", "criteria_annotation").to_pylist()
    assert sorted(r["reason"] for r in ledger if r["verdict"] != "kept") == [
        "clear_question",
        "correct_answer,minimal_answer",
        "not_annotated",
    ]
    kept = {r["id"] for r in rows if r["verdict"] == "kept"}
    for split in ("train", "validation", "test"):
        parent = store.read(PARTITION, "multihop_questions", split)
        child = store.read(PARTITION, "multihop_filtered_qwen", split)
        assert subset_violations(child, parent) == []
        assert set(child["id"].to_pylist()) == kept & set(parent["id"].to_pylist())
    folder = tmp_path / "release"
    build_release(store.root, PARTITION, folder)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    ds = datasets.load_dataset(str(folder), "filtered_qwen", cache_dir=str(tmp_path / "hf"))
    assert sum(ds[s].num_rows for s in ds) == 10
    verdicts = pq.read_table(folder / "provenance" / "filtered_qwen" / "verdicts.parquet").to_pylist()
    per_criterion = Counter((v["filter"], v["verdict"]) for v in verdicts if "/" in v["filter"])
    assert per_criterion[("criteria_annotation/clear_question", "fails")] == 1
    assert per_criterion[("criteria_annotation/clear_question", "holds")] == 11  # 12 annotated
    assert sum(1 for v in verdicts if v["filter"] == "criteria_annotation") == 13
    body, _ = write_card(folder, PARTITION)
    section = body.split("### `filtered_qwen`:")[1].split("### `")[0]
    assert (
        "| `clear_question` | 1 | 12 | 0.0833 |" in section and "| `bridge_in_a` | 0 | 12 | 0.0 |" in section
    )
    assert "1 of 13 questions were never annotated" in section and "same production" in section
    assert "Keep rate by topic" in section


def test_criteria_budget_leaves_the_rest_not_annotated():
    from ragsft_assets.multihop import criteria as cr
    from ragsft_assets.prompts import load_prompt

    model = ScriptedChatModel(lambda m: orjson.dumps({c: True for c in CRITERIA}).decode())
    items = [cr.CriteriaItem(f"{i:024x}", f"q{i}", "a", "A", "ta", "B", "tb") for i in range(3)]
    table = cr.run_criteria(items, model, load_prompt(cr.TASK, "en"), max_questions=2)
    assert table.column("verdict").to_pylist() == ["kept", "kept", "not_annotated"]
    assert len(model.calls) == 2 and model.template_kwargs == [{"enable_thinking": False}] * 2


def test_review_sample_is_blind_balanced_and_reproducible(run, tmp_path):
    from click.testing import CliRunner

    from ragsft_assets.cli import main

    _, store, _, _ = run
    kept = set(store.read(PARTITION, "multihop_filtered")["id"].to_pylist())
    parent = set(store.read(PARTITION, "multihop_questions")["id"].to_pylist())
    env = {"RAGSFT_HOME": str(store.home_path)}

    def sample(n: int, design: str, out: str, config: str = "filtered") -> tuple[list[dict], list[dict]]:
        args = ["review", "sample", "--partition", PARTITION, "--config", config, "--n", str(n)]
        res = CliRunner().invoke(main, [*args, "--design", design, "--out", str(tmp_path / out)], env=env)
        assert res.exit_code == 0, res.output
        read = lambda name: [orjson.loads(x) for x in (tmp_path / out / name).read_bytes().splitlines()]  # noqa: E731
        return read("sample.jsonl"), read("key.jsonl")

    rows, key = sample(6, "balanced", "b6")
    assert [r["id"] for r in rows] == [k["id"] for k in key]
    assert Counter(k["group"] for k in key) == {"kept": 3, "rejected": 3}
    assert all((k["group"] == "kept") == (k["id"] in kept) for k in key)
    assert not any("verdict" in r or "group" in r for r in rows)  # blind
    assert [r["id"] for r in rows] != sorted(r["id"] for r in rows) or len(rows) < 2  # shuffled, not by id
    sample(6, "balanced", "b6bis")
    assert (tmp_path / "b6" / "sample.jsonl").read_bytes() == (
        tmp_path / "b6bis" / "sample.jsonl"
    ).read_bytes()
    # 4 of default are not in filtered, but first_hop never judged (8, 1) (unreadable reply): 3
    # judged and rejected, so 6 kept + 3, never topped up
    _, key = sample(12, "balanced", "b12")
    assert Counter(k["group"] for k in key) == {"kept": 6, "rejected": 3}
    unreadable = {
        r["id"] for r in store.read(PARTITION, "first_hop").to_pylist() if r["verdict"] == "unreadable"
    }
    assert len(unreadable) == 1 and not unreadable & {k["id"] for k in key}
    _, key = sample(13, "random", "r13")  # the whole parent
    assert {k["id"] for k in key} == parent and Counter(k["group"] for k in key) == {"kept": 9, "rejected": 4}
    # filtered_qwen_v2 is drawn against its own parent, filtered_qwen (10 questions, 8 kept by v2)
    qwen = set(store.read(PARTITION, "multihop_filtered_qwen")["id"].to_pylist())
    v2 = set(store.read(PARTITION, "multihop_filtered_qwen_v2")["id"].to_pylist())
    rows, key = sample(100, "random", "v2r", "filtered_qwen_v2")
    assert {r["id"] for r in rows} == qwen and Counter(k["group"] for k in key) == {"kept": 8, "rejected": 2}
    # filtered_qwen: the rejected half is the 2 that fail criteria, never the not_annotated one
    crit = store.read(PARTITION, "criteria_annotation").to_pylist()
    _, key = sample(20, "balanced", "qb", "filtered_qwen")
    fails = {r["id"] for r in crit if r["verdict"] == "fails_criteria"}
    assert {k["id"] for k in key if k["group"] == "rejected"} == fails and len(fails) == 2
    _, key = sample(4, "balanced", "v2b", "filtered_qwen_v2")
    assert {k["id"] for k in key if k["group"] == "rejected"} == qwen - v2
    assert {k["id"] for k in key if k["group"] == "kept"} < v2


def test_targeted_judges_give_filtered_qwen_v2_and_its_corpus(run, tmp_path, monkeypatch):
    import datasets

    from ragsft_assets.multihop.filter_configs import subset_violations
    from ragsft_assets.release.build import build_release, write_card

    result, store, _, _ = run
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["is_subset_of_filtered_qwen"] is True
    bridge = Counter(store.read(PARTITION, "bridge_judge")["verdict"].to_pylist())
    lang = Counter(store.read(PARTITION, "language_judge")["verdict"].to_pylist())
    # funnel: 10 of filtered_qwen judged, 1 dropped by each judge
    assert bridge == {"kept": 9, "several_candidates": 1} and lang == {"kept": 8, "meta_wording": 1}
    qwen = set(store.read(PARTITION, "multihop_filtered_qwen")["id"].to_pylist())
    v2_ids = set()
    for split in ("train", "validation", "test"):
        v2 = store.read(PARTITION, "multihop_filtered_qwen_v2", split)
        assert subset_violations(v2, store.read(PARTITION, "multihop_questions", split)) == []
        v2_ids |= set(v2["id"].to_pylist())
        titles = {t for c in v2["context"].to_pylist() for t in c["title"]}
        corpus = store.read(PARTITION, "corpus_filtered_qwen_v2", split)
        assert set(corpus["title"].to_pylist()) == titles  # golds and distractors, nothing else
        assert corpus.column_names == ["id", "title", "text", "sentences", "qid"]  # the card's five
    assert len(v2_ids) == 8 and v2_ids < qwen
    folder = tmp_path / "release"
    build_release(store.root, PARTITION, folder)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for config, n in (("filtered_qwen_v2", 8), ("corpus_filtered_qwen_v2", None)):
        ds = datasets.load_dataset(str(folder), config, cache_dir=str(tmp_path / "hf"))
        assert n is None or sum(ds[s].num_rows for s in ds) == n
    assert (folder / "provenance" / "filtered_qwen_v2" / "verdicts.parquet").is_file()
    body, _ = write_card(folder, PARTITION)
    section = body.split("### `filtered_qwen_v2`:")[1].split("### `")[0]
    assert (
        "publishability score" in section and "| bridge_judge | several_candidates | dropped | 1 |" in section
    )
    # criterion by criterion here too: the six criteria are the first judge of v2
    assert "| `clear_question` | 1 | 12 | 0.0833 |" in section and "1 of 13 questions were never" in section


def test_review_labels_asset_labels_a_sample_for_agreement(run, tmp_path):
    from click.testing import CliRunner

    from ragsft_assets.cli import main
    from ragsft_assets.defs.multihop.review import review_labels

    _, store, _, _ = run
    out = tmp_path / "sample"
    args = ["review", "sample", "--partition", PARTITION, "--config", "filtered_qwen", "--n", "13"]
    res = CliRunner().invoke(
        main, [*args, "--design", "random", "--out", str(out)], env={"RAGSFT_HOME": str(store.home_path)}
    )
    assert res.exit_code == 0, res.output
    sample = [orjson.loads(x) for x in (out / "sample.jsonl").read_bytes().splitlines()]
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [PARTITION])
    all_hold = ScriptedChatModel(lambda m: orjson.dumps({c: True for c in CRITERIA}).decode())

    def label(role: str) -> tuple[dict, list[dict]]:
        result = dg.materialize(
            [review_labels, dg.AssetSpec("question_drafts"), dg.AssetSpec("abstracts")],
            resources={
                "store": store,
                "annotator": ScriptedChatModel(annotator_responder),
                "judge": all_hold,
            },
            partition_key=PARTITION,
            instance=instance,
            run_config={
                "ops": {
                    "review_labels": {
                        "config": {"sample": str(out / "sample.jsonl"), "overrides": {"criteria_role": role}}
                    }
                }
            },
            selection=[review_labels.key],
        )
        path = out / f"labels-{role}.jsonl"
        return _metadata(result, "review_labels"), [orjson.loads(x) for x in path.read_bytes().splitlines()]

    md, labels = label("annotator")
    where = {r["id"]: QUESTIONS[r["question"]][:2] for r in sample}
    # the sample's order, one label per readable annotation; (8, 1) replied unreadably: no label
    assert [x["id"] for x in labels] == [r["id"] for r in sample if where[r["id"]] != (8, 1)]
    assert {where[x["id"]] for x in labels if not x["valid"]} == set(CRITERIA_FAILS)
    assert (md["questions"], md["valid"], md["invalid"], md["not_annotated"]) == (13, 10, 2, 1)
    _, by_judge = label("judge")  # a second regime: every criterion holds
    assert len(by_judge) == 13 and all(x["valid"] for x in by_judge)
    res = CliRunner().invoke(
        main,
        [
            "agreement",
            str(out / "labels-annotator.jsonl"),
            str(out / "labels-judge.jsonl"),
            "--key",
            str(out / "key.jsonl"),
        ],
    )
    assert res.exit_code == 0, res.output
    report = orjson.loads(res.output)
    assert report["groups"]["kept"]["valid_share"] == 1.0  # filtered_qwen's 10, all valid
    assert (report["groups"]["rejected"]["n"], report["groups"]["rejected"]["valid"]) == (2, 0)
    assert (report["a_only"], report["b_only"]) == (0, 2)  # the judge calls the two failures valid


def test_card_shows_the_cards_funnel_rows_v2_corpus_roles_and_recipes(run, tmp_path):
    """The generated card: the HotpotQA-fr funnel rows beside the card's numbers, gold vs
    distractor-only abstracts per split of corpus_filtered_qwen_v2, and each config's recipe."""
    import pyarrow.parquet as pq

    from ragsft_assets.multihop.card_section import release_sections
    from ragsft_assets.release.build import build_release, write_card

    _, store, _, _ = run
    folder = tmp_path / "release"
    build_release(store.root, PARTITION, folder)
    body, _ = write_card(folder, PARTITION, sections=release_sections(store.root, PARTITION, folder))
    for row in (
        "| questions generated | 34 | 324,944 |",
        "| removed before the judge | 15 | 43,722 |",
        "| of which per-bridge and per-source caps | 2 | 32,900 |",
        "| judged | 19 | 281,119 |",
        "| judge calls, A+B | 19 | 281,119 |",
        "| judge calls, B alone | 18 | 144,144 |",
        "| judge calls, A alone | 16 | 95,470 |",
        "| judge calls, no document | 14 | 69,863 |",
        "| judge calls | 67 | 590,596 |",
        "| judge calls per judged question | 3.53 | 2.10 |",
        "| kept | 13 | 65,565 |",
        "| pairs drawn | 13 | 200,000 |",
    ):
        assert row in body, row
    assert "Judge calls per judged question: **3.53** (the card: 2.10)." in body
    # gold vs distractor-only, counted here from the store's tables
    section = body.split("### `corpus_filtered_qwen_v2`: gold and distractor-only")[1].split("###")[0]
    splits = [f.stem for f in store.files(PARTITION, "multihop_filtered_qwen_v2")]
    splits = [s for s in splits if store.read(PARTITION, "multihop_filtered_qwen_v2", s).num_rows]
    assert splits == ["train", "validation"]  # the release leaves the empty test split out
    for split in splits:
        qs = store.read(PARTITION, "multihop_filtered_qwen_v2", split)
        golds = {t for sf in qs["supporting_facts"].to_pylist() for t in sf["title"]}
        titles = store.read(PARTITION, "corpus_filtered_qwen_v2", split)["title"].to_pylist()
        gold = sum(t in golds for t in titles)
        assert 0 < gold < len(titles)
        assert f"| {split} | {gold} | {len(titles) - gold} | {len(titles)} |" in section, section
    assert "- `default`: Recipe `default`: as the card." in body
    assert "- `filtered_qwen_v2`: Recipe `filtered_qwen_v2`: as the card." in body
    # the corpus configs ship the card's five columns
    for config in ("corpus", "corpus_filtered_qwen_v2"):
        for f in sorted((folder / config).glob("*.parquet")):
            assert pq.read_schema(f).names == ["id", "title", "text", "sentences", "qid"]


def test_a_stage_override_reaches_its_checks_and_the_card(tmp_path):
    """Overrides on `distractors` alone: the questions' contexts hold 2 + 5 paragraphs, which the
    blocking context_size check reads from the distractors stage's recipe (not its own 2 + 8), and
    the dataset card reads every asset that made `default`: not "as the card"."""
    from ragsft_assets.multihop.card_section import release_sections
    from ragsft_assets.release.build import build_release, write_card

    overrides = {"max_per_bridge": 3, "distractors_k": 5}
    result, store, _, _ = materialize(
        tmp_path / "home", {"ops": {"distractors": {"config": {"overrides": overrides}}}}
    )
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert result.success and checks["context_size"].passed
    assert checks["context_size"].metadata["context_size"].value == 7
    rows = store.read(PARTITION, "multihop_questions").to_pylist()
    assert rows and all(len(r["context"]["title"]) == 7 for r in rows)
    audit = {r["measure"]: r for r in store.read(PARTITION, "multihop_audit").to_pylist()}
    assert audit["invariant:context_size"]["ok"]
    folder = tmp_path / "release"
    build_release(store.root, PARTITION, folder)
    body, _ = write_card(folder, PARTITION, sections=release_sections(store.root, PARTITION, folder))
    line = next(x for x in body.splitlines() if x.startswith("- `default`: "))
    assert "as the card" not in line, line
    assert "`max_per_bridge` 3 (card: 2) in distractors" in line
    assert "`distractors_k` 5 (card: 8) in distractors" in line
    # the filtered configs are built on default's questions: the same differences show there
    assert "`max_per_bridge` 3 (card: 2) in distractors" in next(
        x for x in body.splitlines() if x.startswith("- `filtered_qwen_v2`: ")
    )
