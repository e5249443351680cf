"""trust_align: the Trust-Align SFT rows (ALCE / Trust-Score layout) through the QA chain's multi-answer recipe.

The real Trust-Align rows are on the hub only; the tests use the real ALCE and Trust-Align demos
(real questions, passages and cited answers, positive and refusal), whose gold lists are made from
the demo answers (the shared ASQA and QAMPARI records are other questions), and the ASQA/QAMPARI
gold join on constructed rows around the real ASQA and QAMPARI records.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.rag_sft import multi_answer
from ragsft_assets.rag_sft.citations import check_response
from ragsft_assets.rag_sft.examples import ANSWERABLE, UNANSWERABLE, build_prompts
from ragsft_assets.rag_sft.formatting import format_examples
from ragsft_assets.rag_sft.hotpot_input import records_from_table
from ragsft_assets.rag_sft.recipes import HOTPOTQA_CITE_RECIPE, TRUST_ALIGN_RECIPE
from ragsft_assets.sources import trust_align as ta
from ragsft_assets.sources.read import PRESETS, SourceError, read_source
from ragsft_assets_tests.llm_double import ScriptedBackend

DATA = Path(__file__).resolve().parent / "data"
# Gold answers of the demos whose answer is prose (ASQA) or a refusal: strings of the ALCE demo
# answers of the same questions; the QAMPARI demo answers are lists, split below.
DEMO_GOLD = {
    "Which is the most rainy place on earth?": [
        ["Mawsynram"],
        ["Lloró"],
        ["López de Micay"],
        ["Cherrapunji", "Sohra"],
    ],
    "When did the us break away from england?": [["July 2, 1776"], ["September 3, 1783"]],
    "Who set the record for longest field goal?": [["Matt Prater"], ["Ove Johansson"]],
    "Who played galen in planet of the apes?": [["Wright King"], ["Roddy McDowall"]],
    "The Ronettes performed which work?": [["Be My Baby"]],
    "Which film has Glenn Ford as a member of its cast and was directed by Henry Levin?": [
        ["The Man from Colorado"]
    ],
}


def _demos(name: str) -> list[dict]:
    d = json.loads((DATA / name).read_text(encoding="utf-8"))
    return [x for k in ("demos", "positive_demos", "refusal_demos") for x in d.get(k, [])]


def _gold(demo: dict) -> list[list[str]]:
    if demo["question"] in DEMO_GOLD:
        return DEMO_GOLD[demo["question"]]
    return [[re.sub(r"\s*\[\d+\]", "", a).strip().rstrip(".")] for a in demo["answer"].split(", ")]


def demo_source(folder: Path) -> Path:
    """A source folder from the demos: train = the Trust-Align demos (+ ELI5, left out), test = ALCE's."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "trust_align_train.jsonl").open("w", encoding="utf-8") as out:
        for f in ("trust_align/asqa_refusal_demos.json", "trust_align/qampari_refusal_demos.json"):
            for x in _demos(f):
                out.write(
                    json.dumps({**x, "answers": _gold(x), "dataset": f.split("/")[1].split("_")[0]}) + "\n"
                )
        for x in _demos("alce/eli5_default_demos.json"):
            out.write(json.dumps({**x, "dataset": "eli5"}) + "\n")
    with (folder / "trust_align_test.jsonl").open("w", encoding="utf-8") as out:
        for f in ("alce/asqa_default_demos.json", "alce/qampari_default_demos.json"):
            for x in _demos(f):
                out.write(
                    json.dumps({**x, "answers": _gold(x), "dataset": f.split("/")[1].split("_")[0]}) + "\n"
                )
    return folder


def _item(i: int, question: str, docs: list[tuple[str, str]], target: str, gold=(), split="train") -> ta.Item:
    return ta.Item(f"q{i}", "asqa", question, tuple(docs), target, tuple(tuple(g) for g in gold), split)


def test_gold_join_on_the_real_asqa_and_qampari_schemas(tmp_path: Path) -> None:
    asqa = json.loads((DATA / "asqa_raw" / "asqa_dev_5_with_answers.jsonl").read_text().splitlines()[0])
    qampari = json.loads((DATA / "qampari" / "qampari_dev_1000_answers.json").read_text())[0]
    # Trust-Align rows for those two questions (constructed: the real rows are on the hub only).
    rows = [
        {
            "question": asqa["ambiguous_question"],
            "docs": [
                {"title": "Ali Daei", "text": "Ali Daei scored 109 goals for Iran, a men's record."},
                {"title": "Christine Sinclair", "text": "Christine Sinclair holds the overall record."},
            ],
            "answer": "Among men, Ali Daei holds the record [1]; overall it is Christine Sinclair [2].",
            "dataset": "asqa",
        },
        {
            "question": qampari["question"],
            "docs": [{"title": "Ryoichi Ikegami", "text": "Ikegami drew Crying Freeman and Sanctuary."}],
            "answer": "Crying Freeman [1], Sanctuary [1].",
            "dataset": "qampari",
        },
    ]
    (tmp_path / "sft_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # The gold records, verbatim in their own schemas, beside the rows.
    (tmp_path / "asqa_gold.jsonl").write_text(json.dumps(asqa) + "\n")
    (tmp_path / "qampari_gold.json").write_text(json.dumps([qampari]))
    read = read_source(tmp_path, PRESETS["trust_align"])
    rows_out = {r["type"]: r for r in read.table.to_pylist()}
    assert read.rows_per_file["gold_records"] == 2
    a, q = rows_out["asqa"], rows_out["qampari"]
    assert [g[0] for g in a["gold_answers"]] == [p["short_answers"][0] for p in asqa["qa_pairs"]]
    # the reference answers are the gold answers the target contains (any alias: "Ali Daei")
    assert a["reference_answers"] == [["Daei", "Ali Daei"], ["Sinclair", "Christine Sinclair"]]
    assert a["supporting_facts"]["title"] == ["Ali Daei", "Christine Sinclair"]  # the cited passages
    assert a["level"] == "answerable" and a["answer"] == "Daei; Sinclair"
    assert q["reference_answers"] == [["Sanctuary"], ["Crying Freeman"]]  # gold order
    assert q["answers_present"] == 2 and len(q["gold_answers"]) == 6


def test_demo_rows_eli5_out_validation_without_train_and_unanswerable_share(tmp_path: Path) -> None:
    read = read_source(demo_source(tmp_path / "src"), PRESETS["trust_align"])
    funnel = read.rows_per_file
    rows = read.table.to_pylist()
    assert funnel["eli5_left_out"] == 4
    assert {r["type"] for r in rows} == {"asqa", "qampari"}
    train = [r for r in rows if r["split"] == "train"]
    val = [r for r in rows if r["split"] == "validation"]
    train_q = {r["question"] for r in train}
    assert val and not train_q & {r["question"] for r in val}
    assert funnel["rejected:validation_question_in_train"] == 6
    # 4 answerable train rows: at most 20% unanswerable = 1 of the 4 refusal demos kept.
    assert sum(r["level"] == "unanswerable" for r in train) == 1
    assert funnel["rejected:unanswerable_over_share"] == 3
    for r in rows:
        assert len(r["context"]["title"]) == 5 + ta.N_DISTRACTORS  # 5 passages + 4 BM25 distractors
        assert len(set(r["context"]["title"])) == len(r["context"]["title"])
    again = read_source(tmp_path / "src", PRESETS["trust_align"])
    assert again.table.equals(read.table)  # deterministic


def test_unanswerable_kept_only_without_gold_in_passages() -> None:
    refusal = "I apologize, but I couldn't find an answer to your question in the search results."
    docs_with = [("A", "The record is held by Matt Prater, 64 yards."), ("B", "Kicking is hard.")]
    docs_without = [("A", "Field goals are kicked."), ("B", "Kicking is hard.")]
    items = [
        _item(1, "Who kicked?", docs_with, refusal, [["Matt Prater"]]),
        _item(2, "Who kicked far?", docs_without, refusal, [["Matt Prater"]]),
        *(
            _item(10 + i, f"q {i}", [("T", f"answer {i} here")], f"answer {i} [1]", [[f"answer {i}"]])
            for i in range(8)
        ),
    ]
    built = ta.build_rows(items, unanswerable_share=0.2)
    assert ("q1", "unanswerable_but_gold_in_passages") in built.rejected
    kept = {r["id"]: r for r in built.rows}
    assert kept["q2"]["level"] == "unanswerable" and kept["q2"]["supporting_facts"]["title"] == []
    assert "q1" not in kept


def test_trust_aligns_own_label_wins_and_the_fallback_is_said() -> None:
    assert ta.label_of({"label": "refusal"}) == ta.UNANSWERABLE
    assert ta.label_of({"answerable": True}) == ta.ANSWERABLE
    assert ta.label_of({"unanswerable": True}) == ta.UNANSWERABLE
    assert ta.label_of({"demo_type": "positive"}) == ta.ANSWERABLE and ta.label_of({"question": "q"}) is None
    gold = [["Mawsynram"]]
    no_gold_docs = [("A", "Rain falls in India."), ("B", "Monsoons are wet.")]
    # a refusal that still names a gold answer in its text: the label says unanswerable, the
    # target alone would have made it an answer without citation (rejected)
    hedged = "I cannot tell from the documents; some say Mawsynram."
    items = [
        replace(_item(1, "Wettest?", no_gold_docs, hedged, gold), label=ta.UNANSWERABLE),
        _item(2, "Wettest place?", no_gold_docs, hedged, gold),  # no label: inferred from the target
        replace(  # labelled unanswerable, yet a gold string is in its passages: not kept
            _item(3, "Wettest town?", [("A", "Mawsynram is the wettest.")], "No answer.", gold),
            label=ta.UNANSWERABLE,
        ),
        *(
            _item(10 + i, f"q {i}", [("T", f"answer {i} here")], f"answer {i} [1]", [[f"answer {i}"]])
            for i in range(12)
        ),
    ]
    built = ta.build_rows(items, unanswerable_share=0.2)
    kept = {r["id"]: r for r in built.rows}
    assert kept["q1"]["level"] == "unanswerable" and kept["q1"]["label_origin"] == "source"
    assert ("q2", "answer_without_citation") in built.rejected  # the fallback's reading
    assert ("q3", "unanswerable_but_gold_in_passages") in built.rejected
    assert {kept[f"q{10 + i}"]["label_origin"] for i in range(12)} == {"inferred"}
    assert built.funnel["label:source"] == 1 and built.funnel["label:inferred"] == 12


def test_prompt_file_demos_carry_their_label(tmp_path: Path) -> None:
    src = tmp_path / "asqa_refusal_demos.json"
    src.write_text((DATA / "trust_align" / "asqa_refusal_demos.json").read_text(encoding="utf-8"))
    labels = [ta.label_of(r) for _, r in ta._records(src)]
    assert labels == [ta.ANSWERABLE, ta.ANSWERABLE, ta.UNANSWERABLE, ta.UNANSWERABLE]


def test_unanswerable_sampling_share_and_seed() -> None:
    ans = [f"a{i}" for i in range(100)]
    una = [f"u{i}" for i in range(100)]
    kept, dropped = ta.sample_unanswerable(ans, una, 0.2, DEFAULT_SEED)
    assert len(kept) == 25 and len(dropped) == 75  # 25 / (100 + 25) = 20%
    assert ta.sample_unanswerable(list(reversed(ans)), list(reversed(una)), 0.2, DEFAULT_SEED)[0] == kept
    assert ta.sample_unanswerable(ans, una, 0.2, DEFAULT_SEED + 1)[0] != kept
    assert len(ta.sample_unanswerable(ans, una, 0.5, DEFAULT_SEED)[0]) == 100
    with pytest.raises(ValueError):
        ta.sample_unanswerable(ans, una, 1.0, DEFAULT_SEED)


def test_bm25_distractors_skip_top_ranks_gold_and_own_passages() -> None:
    query = _item(
        0, "volcano eruption lava", [("Own", "volcano lava eruption own passage")], "x [1]", [["Krakatoa"]]
    )
    others = [
        _item(i, f"other {i}", [(f"T{i}", text)], "y [1]", [["zzz"]])
        for i, text in enumerate(
            [
                "volcano eruption lava flows rank",  # the best matches: ranks 1-4, skipped
                "volcano eruption lava ash rank",
                "volcano eruption lava cloud rank",
                "volcano eruption lava rock rank",
                "volcano eruption Krakatoa gold",  # holds the query's gold answer: skipped
                "volcano eruption five",
                "volcano six",
                "lava seven",
                "eruption eight",
                "unrelated nine",
            ],
            1,
        )
    ]
    got = ta.bm25_distractors([query, *others])[query.id]
    texts = [t for _, t in got]
    assert len(texts) == 4
    assert not any("rank" in t for t in texts)
    assert not any("Krakatoa" in t for t in texts)
    assert "volcano lava eruption own passage" not in texts
    assert texts[0] == "volcano eruption five"


def test_trust_align_reader_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text(
        json.dumps({"question": "q", "answer": "a [1]", "docs": [{"t": 1}]}) + "\n"
    )
    with pytest.raises(SourceError, match=r"bad.jsonl, line 1: field 'docs' is malformed"):
        read_source(tmp_path, PRESETS["trust_align"])
    (tmp_path / "bad.jsonl").write_text(json.dumps({"question": "q", "docs": []}) + "\n")
    with pytest.raises(SourceError, match=r"line 1: missing field 'answer'"):
        read_source(tmp_path, PRESETS["trust_align"])


def test_elided_excerpts_become_consecutive_verbatim_tags() -> None:
    doc = "Mawsynram in India has an average annual rainfall of 11,872 mm, the official record."
    resp = 'Mawsynram holds it <ref id="1">Mawsynram in India has ... annual rainfall of 11,872 mm</ref>.'
    out, n = multi_answer.split_elided_tags(resp, [doc])
    assert n == 1
    assert out == (
        'Mawsynram holds it <ref id="1">Mawsynram in India has</ref><ref id="1">annual rainfall of 11,872 mm</ref>.'
    )
    assert check_response(out, [doc]).tags_valid
    assert multi_answer.split_elided_tags('<ref id="1">Mawsynram in India has</ref>', [doc]) == (
        '<ref id="1">Mawsynram in India has</ref>',
        0,
    )


def test_document_numbers_outside_tags_and_missing_refs() -> None:
    assert multi_answer.named_document_numbers("As Document 3 says, it rains.") == [3]
    assert multi_answer.named_document_numbers("It rains [5].") == [5]
    assert multi_answer.named_document_numbers('It rains <ref id="2">a lot in [2] here</ref>.') == []
    assert multi_answer.named_document_numbers("It rains a lot in 1861.") == []
    assert multi_answer.has_ref('x <ref id="1">a b c</ref>') and not multi_answer.has_ref("x")


def _prompts(n_answerable: int = 30, n_unanswerable: int = 10):
    rows = []
    for i in range(n_answerable + n_unanswerable):
        una = i >= n_answerable
        docs = [
            (f"T{i}-{k}", f"passage {k} of question {i} says Answer{i}x{k} plainly here") for k in range(6)
        ]
        cited = [] if una else [docs[0][0], docs[1][0]]
        rows.append(
            {
                "id": f"{i:04d}",
                "question": f"Question {i}?",
                "answer": "" if una else f"Answer{i}x0; Answer{i}x1",
                "type": "asqa",
                "level": "unanswerable" if una else "answerable",
                "supporting_facts": {"title": cited, "sent_id": [0] * len(cited)},
                "context": {"title": [t for t, _ in docs], "sentences": [[x] for _, x in docs]},
                "split": "train",
                "gold_answers": [],
                "reference_answers": [],
                "answers_present": 0,
                "label_origin": "inferred",
            }
        )
    records, bad = records_from_table(ta.rows_table(rows))
    assert not bad
    return build_prompts(records, recipe=TRUST_ALIGN_RECIPE), records


def test_multi_answer_prompts_keep_source_unanswerables_no_twins_inline() -> None:
    build, records = _prompts()
    kinds = [p.kind for p in build.prompts]
    assert kinds.count(ANSWERABLE) == 30 and kinds.count(UNANSWERABLE) == 10
    assert all(p.twin_kind == "" and p.citation_style == "inline" for p in build.prompts)
    for p in build.prompts:
        if p.kind == ANSWERABLE:
            assert set(p.gold_titles) <= set(p.titles)  # supporting documents never dropped
        assert p.chunks_total >= 2
    # without the recipe, a row without supporting documents is a bad record (hotpotqa_cite's rule)
    plain = build_prompts(records, recipe=replace(TRUST_ALIGN_RECIPE, multi_answer=False))
    assert sum(d.reason == "bad_record" for d in plain.decisions) == 10


def test_multi_answer_formatting_drops_are_counted_and_recorded() -> None:
    build, _ = _prompts(3, 0)
    p0, p1, p2 = sorted(build.prompts, key=lambda p: p.id)

    def quote(p, k: int) -> str:
        return p.paragraphs[k]

    responses = {
        p0.id: f'It is so <ref id="1">{quote(p0, 0)}</ref>.',
        p1.id: f"As Document 2 says, it is {p1.answer}.",
        p2.id: f"It is {p2.answer}.",
    }
    fmt = format_examples(build.prompts, responses, set(responses), recipe=TRUST_ALIGN_RECIPE)
    reasons = {d.candidate_id: d.reason for d in fmt.decisions}
    assert reasons == {p0.id: "formatted", p1.id: "names_document_number", p2.id: "answerable_without_ref"}
    assert fmt.funnel["dropped:names_document_number"] == 1
    assert fmt.funnel["dropped:answerable_without_ref"] == 1
    plain = format_examples(build.prompts, responses, set(responses), recipe=HOTPOTQA_CITE_RECIPE)
    assert len(plain.rows) == 3  # hotpotqa_cite's cleanup keeps them


def test_multi_answer_judging_has_no_citation_f1_requirement() -> None:
    from ragsft_assets.rag_sft.verdicts import judge_examples
    from ragsft_assets_tests.llm_double import ScriptedChatModel

    build, _ = _prompts(1, 0)
    (p,) = build.prompts
    n = p.titles.index(p.gold_titles[0]) + 1
    # cites one of the two supporting documents only: F1 < 1, still a full multi-answer answer
    resp = f'{p.answer} <ref id="{n}">{p.paragraphs[n - 1]}</ref>'
    rows = [{"id": p.id, "response": resp, "status": "ok", "cache_key": "k"}]
    seen = []

    def judge(messages) -> str:
        seen.append(messages[0]["content"])
        return json.dumps({"score": 5, "reason": "scripted"})

    multi = judge_examples([p], rows, ScriptedChatModel(judge), recipe=TRUST_ALIGN_RECIPE)
    assert multi.verdicts[0].kept and "each must be given" in seen[0]
    plain = judge_examples([p], rows, ScriptedChatModel(judge))
    assert plain.verdicts[0].reason == "citation_f1"


# --- the QA chain on a trust_align.en source made of the demos, with scripted models -------------

KEY = "trust_align.en"
BACKEND = "trust-align-scripted"
REFUSAL = "The documents do not allow me to answer this question."
NAMES_A_DOCUMENT = "Which film has Gong Li as a member of its cast?"  # its answer names "Document 2"
ELIDED = "Which is the most rainy place on earth?"  # its first excerpt is elided: A ... B


def _window(doc: str, answer: str) -> str | None:
    """Whole words of ``doc`` around the first occurrence of ``answer`` (3 words either side)."""
    at = doc.lower().find(answer.lower())
    if at < 0:
        return None
    words, spans, pos = doc.split(" "), [], 0
    for w in words:
        spans.append((pos, pos + len(w)))
        pos += len(w) + 1
    first = next(k for k, (a, b) in enumerate(spans) if b > at)
    last = next(k for k, (a, b) in enumerate(spans) if b >= at + len(answer))
    return " ".join(words[max(0, first - 3) : last + 4])


def ta_generator(messages) -> str:
    from ragsft_assets.rag_sft.layout import parse_documents

    system, question = messages[0]["content"], messages[1]["content"]
    refs = REFERENCES.get(question) or []
    docs = [t for _, t in parse_documents(system)]
    parts = []
    for k, answer in enumerate(refs):
        for n, doc in enumerate(docs, 1):
            excerpt = _window(doc, answer)
            if excerpt:
                if question == ELIDED and k == 0:  # an elided excerpt: the recipe splits it into two tags
                    words = doc.split(" ")
                    excerpt = f"{' '.join(words[:4])} ... {' '.join(words[6:10])}"
                parts.append(f'{answer} <ref id="{n}">{excerpt}</ref>.')
                break
    if not parts:
        return REFUSAL
    tail = " See Document 2." if question == NAMES_A_DOCUMENT else ""
    return " ".join(parts) + tail


def ta_judge(messages) -> str:
    text = messages[0]["content"]
    if "Reference answers (each must be given):" in text:
        answers = re.search(r"Reference answers \(each must be given\): (.*)\n", text).group(1).split("; ")
        reply = text.split("Assistant's answer", 1)[1]
        return json.dumps({"score": 5 if all(a in reply for a in answers) else 2, "reason": "scripted"})
    if "declines to answer" in text:
        return json.dumps({"refuses": "do not allow me" in text, "reason": "scripted"})
    return json.dumps({"score": 5, "reason": "scripted"})


REFERENCES: dict[str, list[str]] = {}
RESPONDERS = {"ta-gen": ta_generator, "ta-judge": ta_judge}


class ResponderBackend(ScriptedBackend):
    """The scripted responders as a backend, so every call goes through the real LLMResource client."""

    NAME = BACKEND

    def respond(self, messages) -> str:  # noqa: ANN001
        return RESPONDERS[self.model](messages)


@pytest.fixture(scope="module")
def ta_run(tmp_path_factory: pytest.TempPathFactory):
    from click.testing import CliRunner

    from ragsft_assets.cli import main
    from ragsft_assets_tests.test_qa_sources import run_qa_sft_job

    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSFT_HOME", str(home))
    mp.delenv("DAGSTER_HOME", raising=False)
    src = demo_source(home.parent / f"{home.name}-trust_align_demos")
    added = CliRunner().invoke(main, ["sources", "add", KEY, "--from", str(src)], catch_exceptions=False)
    for r in read_source(src, PRESETS["trust_align"]).table.to_pylist():
        REFERENCES[r["question"]] = [g[0] for g in r["reference_answers"]]
    result, store = run_qa_sft_job(home, KEY, ResponderBackend, "ta-gen", "ta-judge")
    yield home, added, result, store
    mp.undo()


def test_qa_sft_job_writes_a_trust_align_release(ta_run) -> None:
    import datasets
    from click.testing import CliRunner

    from ragsft_assets.cli import main

    home, added, result, store = ta_run
    assert added.exit_code == 0, added.output
    assert result.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {
        "twins_together": True,
        "citations_verified": True,
        "layout_intact": True,
        "release_verifies": True,
    }
    prompts = store.read(KEY, "rag_prompts").to_pylist()
    assert {p["twin_kind"] for p in prompts} == {""} and {p["citation_style"] for p in prompts} == {"inline"}
    assert sorted({p["split"] for p in prompts}) == ["train", "validation"]
    assert sum(p["kind"] == "unanswerable" for p in prompts) == 1
    folder = home / "releases" / KEY
    ds = datasets.load_dataset(str(folder), "trust_align")
    assert sorted(ds) == ["train", "validation"]
    # the Luciole RAG card: "Same three fields as hotpotqa_cite"; the ids are in provenance
    assert {tuple(ds[s].features) for s in ds} == {("messages", "supporting_facts_titles", "chunks_total")}
    assert (folder / "provenance" / "trust_align" / "ids.parquet").is_file()
    rows = [r for s in ds for r in ds[s]]
    by_question = {r["messages"][1]["content"]: r["messages"][2]["content"] for r in rows}
    assert NAMES_A_DOCUMENT not in by_question  # dropped: names "Document 2" outside a tag
    elided = by_question[ELIDED]  # the elided excerpt split into two consecutive tags, verbatim
    assert '<ref id="1">Mawsynram Mawsynram () is</ref><ref id="1">in the East Khasi</ref>' in elided
    assert " ... " not in elided
    assert any(REFUSAL in a for a in by_question.values())  # the kept unanswerable row
    verified = CliRunner().invoke(main, ["verify", str(folder)], catch_exceptions=False)
    assert verified.exit_code == 0, verified.output
    ledger = store.read(KEY, "rag_sft").num_rows
    assert ledger == len(rows)
    decisions = datasets.load_dataset("parquet", data_files=str(folder / "provenance" / "decisions.parquet"))
    reasons = set(decisions["train"]["reason"])
    assert "names_document_number" in reasons
    card = (folder / "README.md").read_text()
    assert "trust_align statistics" in card and "| asqa |" in card
    # which unanswerable label was used: the demo rows carry none, every one was inferred
    n = len({p["question_id"] for p in prompts})
    assert (
        f"Trust-Align's own label for 0 question(s), inferred from the target (no gold answer in it) for {n}"
        in card
    )
    # the Luciole RAG card's parts: the recipe, the quoted citation rule, the card's statistics
    assert "Recipe `trust_align`: as the card." in card
    assert "> When quoting from the context, wrap each excerpt inline" in card
    assert "the card's statistics" in card
    # the card's "Source data and licenses": Trust-Align and ASQA Apache 2.0, QAMPARI CC0 1.0
    assert "Learning to Refuse, data distributed under Apache 2.0." in card
    assert "Long-Form Answers, distributed under Apache 2.0." in card
    assert "Many Answers, distributed under CC0 1.0." in card and "Abstracts only" not in card
    manifest = json.loads((folder / "provenance" / "trust_align" / "manifest.json").read_text())
    assert manifest["asset"] == "rag_sft" and manifest["snapshot"] == KEY


def _hub_rows(path: Path, names: list[str]) -> list[dict]:
    """Uniform JSON-lines rows (the hub's JSON loader wants one schema) from demo files, labelled."""
    rows = []
    for name in names:
        data = json.loads((DATA / name).read_text(encoding="utf-8"))
        for kind, label in (("positive_demos", "positive"), ("refusal_demos", "refusal")):
            for x in data.get(kind, []):
                docs = [{"title": d["title"], "text": d["text"]} for d in x["docs"]]
                rows.append(
                    {"question": x["question"], "docs": docs, "answer": x["answer"], "answers": _gold(x)}
                )
                rows[-1].update({"label": label, "dataset": name.split("/")[1].split("_")[0]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def test_hub_reads_the_cards_data_dir_and_pins_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from ragsft_assets.cli import main
    from ragsft_assets.corpus.hub_snapshot import snapshot_revision

    hub = tmp_path / "Trust-Score"  # a local folder laid out like the hub's declare-lab/Trust-Score
    sft = _hub_rows(hub / "Trust-Align" / "sft" / "train.jsonl", ["trust_align/asqa_refusal_demos.json"])
    _hub_rows(hub / "Trust-Align" / "dpo" / "train.jsonl", ["trust_align/qampari_refusal_demos.json"])
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    home = tmp_path / "home"
    runner = CliRunner(env={"RAGSFT_HOME": str(home), "DAGSTER_HOME": None})
    res = runner.invoke(main, ["sources", "add", KEY, "--hub", str(hub)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    state = snapshot_revision(home / "sources" / KEY)
    assert state["revision"] == ta.HUB_REVISION == "0b89ac0"  # the card's commit, pinned by default
    manifest = json.loads((home / "sources" / KEY / "hub.json").read_text())
    assert manifest["data_dir"] == ta.HUB_DATA_DIR == "Trust-Align/sft"
    # only the card's folder was read (the dpo folder's QAMPARI rows are not there)
    questions = {
        r["question"] for r in read_source(home / "sources" / KEY, PRESETS["trust_align"]).table.to_pylist()
    }
    assert questions and questions <= {r["question"] for r in sft}
    assert f"source {KEY}:" in res.output
    listed = runner.invoke(main, ["sources", "list"], catch_exceptions=False).output
    assert "data_dir=Trust-Align/sft split=train revision=0b89ac0" in listed


def test_sources_add_with_no_question_fails_naming_the_reasons(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ragsft_assets.cli import main

    src = tmp_path / "eli5_only.jsonl"
    rows = [{**x, "dataset": "eli5"} for x in _demos("alce/eli5_default_demos.json")]
    rows.append({**_demos("trust_align/asqa_refusal_demos.json")[0], "dataset": "asqa"})  # no gold answers
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    runner = CliRunner(env={"RAGSFT_HOME": str(tmp_path / "home"), "DAGSTER_HOME": None})
    res = runner.invoke(main, ["sources", "add", KEY, "--from", str(src)])
    assert res.exit_code != 0
    assert (
        "0 questions" in res.output
        and "no_gold_answers: 1" in res.output
        and "eli5_left_out: 4" in res.output
    )
    assert not (tmp_path / "home" / "sources" / KEY).exists()


def test_sources_add_help_lists_every_preset() -> None:
    from click.testing import CliRunner

    from ragsft_assets.cli import main
    from ragsft_assets.cli.sources import PRESET_NAMES

    assert sorted(PRESET_NAMES) == sorted(PRESETS)
    out = CliRunner().invoke(main, ["sources", "add", "--help"]).output
    assert "trust_align" in out and all(name in out for name in PRESETS)
