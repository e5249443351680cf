"""Outside question sets: `ragsft sources`, the qa_source partitions and the QA chain to a release.

The 70 real HotpotQA training records go in through `ragsft sources add`; the QA chain runs with the
test doubles of test_rag_sft_assets (scripted by question) as `qa_sft_job`, behind a registered backend
so that every call goes through the real `LLMResource` client and its cache (the manifest's model roles
and sampling parameters are read from there).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from statistics import median

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.definitions import build_definitions
from ragsft_assets.defs.resources import default_resources
from ragsft_assets.ids import DEFAULT_SEED
from ragsft_assets.llm import engines
from ragsft_assets.rag_sft.layout import parse_documents
from ragsft_assets.resources.llm import LLMResource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets.sources.read import PRESETS, SourceError, read_source
from ragsft_assets_tests.llm_double import ScriptedBackend, ScriptedChatModel
from ragsft_assets_tests.test_rag_sft_assets import DATA, RECORDS, generator_responder, judge_responder

KEY = "hotpotqa.en"
BACKEND = "qa-scripted"
RESPONDERS = {"gen-double": generator_responder, "judge-double": judge_responder}


class ResponderBackend(ScriptedBackend):
    """The scripted responders of test_rag_sft_assets as a backend (one per model name)."""

    NAME = BACKEND

    def respond(self, messages) -> str:  # noqa: ANN001
        return RESPONDERS[self.model](messages)


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_qa_sft_job(
    home: Path, key: str, backend: type[ScriptedBackend], generator: str, judge: str
) -> tuple[dg.ExecuteInProcessResult, ArtifactStore]:
    """``qa_sft_job`` in process on the source ``key`` of ``home``: the generator and judge roles are
    ``backend``'s models ``generator`` and ``judge`` behind one LLM cache there; whitespace tokens."""
    store = ArtifactStore(home=str(home))
    engines.register_backend(backend.NAME, backend)
    cache = str(home / "llm_cache")
    resources = {
        **default_resources(),
        "store": store,
        "generator": LLMResource(backend=backend.NAME, model=generator, cache_dir=cache, role="generator"),
        "judge": LLMResource(backend=backend.NAME, model=judge, cache_dir=cache, role="judge"),
    }
    job = build_definitions(resources).get_job_def("qa_sft_job")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("qa_source", [key])
    config = {"tokenizer": "whitespace"}
    ops = {
        f"qa__{n}": {"config": config} for n in ("rag_prompts", "rag_responses", "rag_verdicts", "rag_sft")
    }
    return job.execute_in_process(partition_key=key, instance=instance, run_config={"ops": ops}), store


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSFT_HOME", str(home))
    mp.delenv("DAGSTER_HOME", raising=False)
    copy = home.parent / f"{home.name}-hotpot_train.json"
    shutil.copy(DATA, copy)
    added = _cli("sources", "add", KEY, "--from", str(copy))
    result, store = run_qa_sft_job(home, KEY, ResponderBackend, "gen-double", "judge-double")
    yield home, added, result, store
    mp.undo()


def test_sources_add_list_and_the_qa_chain_prompts(qa_run) -> None:
    home, added, result, store = qa_run
    assert added.exit_code == 0, added.output
    assert "70 question(s)" in added.output
    assert (home / "sources" / KEY / "source.json").is_file()
    assert f"{KEY}\tfolder, partition" in _cli("sources", "list").output
    assert result.success
    prompts = store.read(KEY, "rag_prompts").to_pylist()
    assert {p["split"] for p in prompts} == {"train"}
    assert len({p["question_id"] for p in prompts}) == 70
    for p in prompts:  # the OpenRAG layout, parsed back block by block
        docs = parse_documents(p["system"])
        assert len(docs) == p["chunks_total"]
        assert 2 <= p["chunks_total"] <= 10, p["chunks_total"]
    twins = [p for p in prompts if p["kind"] == "unanswerable"]
    kinds = [p["twin_kind"] for p in twins]
    assert 0.12 <= len(twins) / 70 <= 0.32  # 22% twins
    assert kinds.count("both") > kinds.count("one") > 0  # 60% / 40%
    # card statistics in the rag_sft metadata: type/level shares generated vs kept, answer/refusal words
    md = next(
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "qa/rag_sft"
    )
    assert md["drop_answer_only_in_ref"].value is False  # hotpotqa_cite's card keeps them
    assert md["drop_wrong_language"].value is False
    stats = md["statistics"].value
    mix = stats["question_mix"]
    assert mix["generated"]["questions"] == 70
    assert mix["generated"]["type"] == {
        t: round(n / 70, 4) for t, n in Counter(r["type"] for r in RECORDS).items()
    }
    by_example = {p["id"]: p["question_id"] for p in prompts}
    kept = {by_example[r["id"]] for r in store.read(KEY, "rag_sft").to_pylist()}
    assert mix["kept"]["questions"] == len(kept) < 70
    assert abs(sum(mix["kept"]["level"].values()) - 1) < 1e-3
    assert stats["answer_words"]["median"] > 0 and stats["refusal_words"]["median"] > 0


def test_qa_sft_job_writes_a_hotpotqa_cite_release(qa_run) -> None:
    import datasets

    home, _, result, _ = qa_run
    folder = home / "releases" / KEY
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {
        "twins_together": True,
        "citations_verified": True,
        "layout_intact": True,
        "release_verifies": True,
    }
    ds = datasets.load_dataset(str(folder), "hotpotqa_cite")
    assert list(ds) == ["train"]
    # the Luciole RAG card: "Each row has three fields"; the ids are in provenance
    assert list(ds["train"].features) == ["messages", "supporting_facts_titles", "chunks_total"]
    assert (folder / "provenance" / "hotpotqa_cite" / "ids.parquet").is_file()
    # its "Source data and licenses": HotpotQA's, not the Wikipedia abstracts' ("Abstracts only")
    card = (folder / "README.md").read_text()
    assert "Answering, distributed under CC BY-SA 4.0." in card and "Abstracts only" not in card
    assert 0 < ds["train"].num_rows < 70 * 2
    manifest = json.loads((folder / "provenance" / "hotpotqa_cite" / "manifest.json").read_text())
    assert manifest["snapshot"] == KEY and manifest["asset"] == "rag_sft"
    assert f"{home.name}-hotpot_train.json" in manifest["source"]["files"]  # the installed source file
    verified = _cli("verify", str(folder))
    assert verified.exit_code == 0, verified.output
    assert (folder / "provenance" / "decisions.parquet").is_file()
    assert (folder / "provenance" / "hotpotqa_cite" / "lineage.parquet").is_file()


def test_qa_manifest_run_config_and_llm_roles(qa_run) -> None:
    home, _, _, store = qa_run
    manifest = json.loads(
        (home / "releases" / KEY / "provenance" / "hotpotqa_cite" / "manifest.json").read_text()
    )
    run_config = manifest["run_config"]
    assert sorted(run_config) == ["questions", "rag_prompts", "rag_responses", "rag_sft", "rag_verdicts"]
    # Dagster's config resolution: what the run passed, completed with the defaults
    assert run_config["questions"] == {"splits": ["train"]}
    for stage in ("rag_prompts", "rag_responses", "rag_verdicts", "rag_sft"):
        cfg = run_config[stage]
        assert cfg["tokenizer"] == "whitespace" and cfg["seed"] == DEFAULT_SEED, (stage, cfg)
        assert cfg["recipe"] is None and cfg["overrides"] == {}  # the partition's recipe, as the card
    # each stage records the resolved recipe beside its files: hotpotqa_cite, as the card
    from ragsft_assets import recipes

    records = recipes.read_records(store.root / KEY)
    assert sorted(records) == ["rag_prompts", "rag_responses", "rag_sft", "rag_verdicts"]
    assert all(r["recipe"] == "hotpotqa_cite" and r["changed"] == {} for r in records.values())
    assert records["rag_prompts"]["values"]["twin_share"] == 0.22
    roles = manifest["llm_roles"]
    assert sorted(roles) == ["rag_responses", "rag_verdicts"]
    assert sorted(roles["rag_responses"]) == ["generator"] and sorted(roles["rag_verdicts"]) == ["judge"]
    gen, judge = roles["rag_responses"]["generator"], roles["rag_verdicts"]["judge"]
    assert (gen["backend"], gen["model"], gen["weights_id"]) == (BACKEND, "gen-double", "0" * 64)
    assert (judge["backend"], judge["model"]) == (BACKEND, "judge-double")
    # call counts and cache hits are run statistics, not part of the manifest's roles
    assert "calls" not in gen and "cache_hits" not in judge
    # sampling parameters of the cached calls: the generator's run config, the judge's temperature 0
    assert gen["sampling"]["temperature"] == 0.1 and gen["sampling"]["max_tokens"] == 512
    assert gen["sampling"]["seed"] == DEFAULT_SEED
    assert judge["sampling"]["temperature"] == 0
    assert "missing" not in json.dumps(manifest["llm_calls"])


def test_qa_card_statistics(qa_run) -> None:
    home, _, result, store = qa_run
    card = (home / "releases" / KEY / "README.md").read_text()
    md = next(
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "qa/release"
    )
    stats = md["statistics"].value
    rows = store.read(KEY, "rag_sft").to_pylist()
    answers = sorted(len(r["messages"][-1]["content"].split()) for r in rows if r["supporting_facts_titles"])
    assert stats["answer_words"]["median"] == median(answers) > 0
    assert stats["documents_per_prompt"]["min"] >= 2 and stats["documents_per_prompt"]["max"] <= 10
    docs = stats["documents_per_prompt"]
    ans, ref, tags = stats["answer_words"], stats["refusal_words"], stats["ref_tags_per_answerable"]
    for line in (
        f"| documents per prompt (mean, median, min-max) | {docs['mean']}, {docs['median']}, "
        f"{docs['min']}-{docs['max']} |",
        f"| answer words (median, p90) | {ans['median']}, {ans['p90']} |",
        f"| refusal words (median, p90) | {ref['median']}, {ref['p90']} |",
        f"| `<ref>` tags per answer (mean, median) | {tags['mean']}, {tags['median']} |",
        f"| rows with an elided excerpt (`A ... B`) | {stats['elided_excerpt_share']} |",
    ):
        assert line in card, line
    com = stats["commitment"]
    assert com["mix_refusals"] > 0 and abs(com["refusal_share"] - 0.1) < 0.03
    assert f"| commitment after one word | {com['commitment_1']} |" in card
    # the question mix, generated vs kept, as the rag_sft asset computed it
    mix = stats["question_mix"]
    assert "question mix, generated vs kept" in card
    assert f"| questions |  | 70 | {mix['kept']['questions']} |" in card
    for facet in ("type", "level"):
        for value, share in mix["generated"][facet].items():
            kept = mix["kept"][facet].get(value, 0.0)
            assert f"| {facet} | {value} | {share} | {kept} |" in card
    sft_md = next(
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "qa/rag_sft"
    )
    assert sft_md["statistics"].value["question_mix"] == mix
    # the Luciole RAG card's own statistics, as rag_sft computed them with the run's recipe
    assert "Recipe `hotpotqa_cite`: as the card." in card
    assert "Quoted word for word from the card (OpenRAG's inference prompt)" in card
    gold, strict = stats["refusals_gold_left"], stats["strict_rule"]["strict"]
    assert gold["none"] + gold["one"] > 0 and gold["none"] > gold["one"]  # 60% of twins lose both
    assert (
        f"| refusals with no gold left / one gold left (share of twin refusals) | {gold['none']} / {gold['one']}"
        in card
    )
    assert f"| rows citing in a References section | {stats['references_share']} |" in card
    assert f"{strict['rows']} ({strict['answerable']} / {strict['unanswerable']})" in card
    assert (
        f"| answers citing exactly 2 distinct documents | {stats['answers_citing_two_documents']} |" in card
    )
    assert f"| answers naming a source by number in the text | {stats['answers_naming_source']} |" in card
    assert "flagged in the ledger, kept)" in card and "tokenizer: whitespace" in card


def test_one_partition_set_per_key(tmp_home: Path) -> None:
    assert _cli("snapshots", "add", "sample.fr", "--sample").exit_code == 0
    refused = _cli("sources", "add", "sample.fr", "--from", str(DATA), "--preset", "hotpotqa")
    assert refused.exit_code != 0 and "already a snapshot key" in refused.output
    assert _cli("sources", "add", "hotpot.en", "--from", str(DATA), "--preset", "hotpotqa").exit_code == 0
    refused = _cli("snapshots", "add", "hotpot.en", "--sample")
    assert refused.exit_code != 0 and "already a source key" in refused.output
    bad = _cli("sources", "add", "HotpotQA", "--from", str(DATA))
    assert bad.exit_code != 0 and "invalid source key" in bad.output
    assert _cli("sources", "remove", "hotpot.en").exit_code == 0
    assert not (tmp_home / "sources" / "hotpot.en").exists()


def test_layouts_ids_mapping_and_errors(tmp_path: Path) -> None:
    hotpot = PRESETS["hotpotqa"]
    original = read_source(DATA, hotpot).table
    # JSON lines without `_id`: ids from the question and its document titles
    lines = tmp_path / "no_ids.jsonl"
    lines.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "_id"}) + "\n" for r in RECORDS[:3])
    )
    derived = read_source(lines, hotpot).table.to_pylist()
    assert all(len(r["id"]) == 24 and r["id"] not in {x["_id"] for x in RECORDS} for r in derived)
    moved = {**{k: v for k, v in RECORDS[0].items() if k != "_id"}, "context": RECORDS[0]["context"][::-1]}
    lines.write_text(json.dumps(moved) + "\n")
    assert read_source(lines, hotpot).table["id"][0].as_py() not in {r["id"] for r in derived}
    # the hub's hotpot_qa Parquet layout (struct of lists) reads to the same table
    hub = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(original.drop_columns(["split"]), hub)
    assert read_source(hub, hotpot).table.equals(original)
    # a mapping file for another QA set's column names
    renamed = tmp_path / "other.jsonl"
    renamed.write_text(
        "".join(
            json.dumps(
                {
                    "qid": r["_id"],
                    "q": r["question"],
                    "a": r["answer"],
                    "ctx": r["context"],
                    "sf": r["supporting_facts"],
                }
            )
            + "\n"
            for r in RECORDS[:5]
        )
    )
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("id: qid\nquestion: q\nanswer: a\ncontext: ctx\nsupporting_facts: sf\n")
    added = CliRunner(env={"RAGSFT_HOME": str(tmp_path / "h")}).invoke(
        main, ["sources", "add", "other.en", "--from", str(renamed), "--mapping", str(mapping)]
    )
    assert added.exit_code == 0 and "5 question(s)" in added.output, added.output
    # errors name the file, the line and the field
    broken = tmp_path / "broken.jsonl"
    broken.write_text(
        json.dumps(RECORDS[0]) + "\n" + json.dumps({"question": "q", "answer": "a", "context": []}) + "\n"
    )
    with pytest.raises(SourceError, match=r"broken\.jsonl, line 2: missing field 'supporting_facts'"):
        read_source(broken, hotpot)
    with pytest.raises(SourceError, match="unknown format"):
        read_source(tmp_path / "mapping.yaml", hotpot)
    with pytest.raises(SourceError, match="does not exist"):
        read_source(tmp_path / "nothing", hotpot)
    assert isinstance(original, pa.Table) and original.num_rows == 70


def test_sft_citation_check_honours_strict_quotes() -> None:
    from ragsft_assets.defs.rag_sft.assets import sft_checks
    from ragsft_assets.rag_sft.layout import render_documents

    docs = [("Paris", "Paris is the capital of France."), ("Lyon", "Lyon is a city in France.")]
    row = {
        "id": "a",
        "pair_id": "p",
        "chunks_total": 2,
        "supporting_facts_titles": ["Paris"],
        "messages": [
            {"role": "system", "content": render_documents(docs)},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": 'Paris. <ref id="1">Paris</ref>'},  # a one-word quote
        ],
    }

    def passed(**kw) -> bool:
        results = sft_checks([row], [], **kw)
        return next(r.passed for r in results if r.check_name == "citations_verified")

    assert not passed()  # too_short under the strict verifier
    assert passed(strict_quotes=False)  # what the verdicts accepted with strict_quotes: false


def test_questions_over_the_token_budget_are_dropped(tmp_path: Path) -> None:
    from ragsft_assets.cli.sources import install_source
    from ragsft_assets.defs.rag_sft.assets import qa_rag_prompts
    from ragsft_assets.defs.rag_sft.qa import questions
    from ragsft_assets.rag_sft import examples
    from ragsft_assets.rag_sft.layout import join_sentences

    install_source(KEY, DATA, preset="hotpotqa", mapping_file=None, home=tmp_path)
    words = {r["_id"]: sum(len(join_sentences(s).split()) for _, s in r["context"]) for r in RECORDS}
    budget = sorted(words.values())[50]  # 20 of the 70 questions are over it
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("qa_source", [KEY])
    store = ArtifactStore(home=str(tmp_path))
    result = dg.materialize(
        [questions, qa_rag_prompts],
        resources={"store": store},
        partition_key=KEY,
        instance=instance,
        run_config={
            "ops": {
                "qa__rag_prompts": {
                    "config": {"tokenizer": "whitespace", "overrides": {"document_token_budget": budget}}
                }
            }
        },
    )
    assert result.success
    over = {q for q, n in words.items() if n > budget}
    assert len(over) == 19  # ties at the budget stay
    prompts = store.read(KEY, "rag_prompts").to_pylist()
    prompted = {p["question_id"] for p in prompts}
    assert prompted & over == set() and len(prompted) >= 70 - len(over) - 2  # no twin of a dropped one
    from ragsft_assets.release.decisions import all_decisions

    rows = [r for r in all_decisions(store.root, KEY).to_pylist() if r["reason"] == "over_token_budget"]
    assert {r["candidate_id"] for r in rows} == over and all(r["verdict"] == "dropped" for r in rows)
    md = result.asset_materializations_for_node("qa__rag_prompts")[0].metadata
    assert md["document_token_budget"].value == budget
    # French data (hotpotqa_fr_abstracts_v2): every twin loses both golds, budget 8,192 by default
    french = dg.materialize(
        [qa_rag_prompts],
        resources={"store": store},
        partition_key=KEY,
        instance=instance,
        run_config={"ops": {"qa__rag_prompts": {"config": {"tokenizer": "whitespace", "language": "fr"}}}},
    )
    md = french.asset_materializations_for_node("qa__rag_prompts")[0].metadata
    assert (
        md["document_token_budget"].value == 8192 and md["recipe"].value["values"]["twin_both_share"] == 1.0
    )
    assert md["recipe"].value["recipe"] == "hotpotqa_fr_abstracts_v2"
    twins = [p for p in store.read(KEY, "rag_prompts").to_pylist() if p["kind"] == "unanswerable"]
    assert len(twins) > 5 and {p["twin_kind"] for p in twins} == {"both"}
    # the English OpenRAG instructions (answer in the language of the question); French phrases
    fr_prompts = store.read(KEY, "rag_prompts").to_pylist()
    assert md["instructions_language"].value == "en" and {p["language"] for p in fr_prompts} == {"fr"}
    assert all(p["system"].startswith("You are an assistant") for p in fr_prompts)
    assert all("Answer in the language of the question" in p["system"] for p in fr_prompts)
    strict = [p for p in fr_prompts if p["refusal_rule"] == "strict"]
    assert strict and all(p["refusal_phrase"] in examples.refusal_phrases("fr") for p in strict)
    assert all(f'"{p["refusal_phrase"]}"' in p["system"] for p in strict)
    # the French-quality judge gates the answerable examples only (the product's scope)
    language_judged: list[str] = []

    def judge(messages) -> str:
        text = messages[0]["content"]
        if "qualité de la langue" in text:
            language_judged.append(text)
            return json.dumps({"score": 5, "reason": "scripted"})
        if "Décide si sa réponse refuse" in text:
            return json.dumps({"refuses": True, "reason": "scripted"})
        return json.dumps({"score": 5, "reason": "scripted"})

    from ragsft_assets.defs.rag_sft.assets import qa_rag_responses, qa_rag_sft, qa_rag_verdicts

    judged = dg.materialize(
        [qa_rag_responses, qa_rag_verdicts, qa_rag_sft],
        resources={
            "store": store,
            "generator": ScriptedChatModel(generator_responder, "gen-double"),
            "judge": ScriptedChatModel(judge, "judge-double"),
        },
        partition_key=KEY,
        instance=instance,
        run_config={
            "ops": {
                f"qa__{n}": {"config": {"language": "fr", "tokenizer": "whitespace"}}
                for n in ("rag_responses", "rag_verdicts", "rag_sft")
            }
        },
    )
    assert judged.success
    sft_md = judged.asset_materializations_for_node("qa__rag_sft")[0].metadata
    assert sft_md["drop_answer_only_in_ref"].value is True  # the fr card's cleanup, on by default
    assert sft_md["drop_wrong_language"].value is True
    # the double answers in English: on French data those pairs go (wrong_language, twin_dropped)
    from ragsft_assets.release.decisions import all_decisions as decisions_of

    sft_rows = [r for r in decisions_of(store.root, KEY).to_pylist() if r["stage"] == "rag_sft"]
    assert any(r["reason"] == "wrong_language" for r in sft_rows)
    assert not any(r["reason"] == "formatted" for r in sft_rows)
    verdicts = store.read(KEY, "rag_verdicts").to_pylist()
    refusals = [v for v in verdicts if v["kind"] == "unanswerable" and v["refuses"] is not None]
    answers = [v for v in verdicts if v["kind"] == "answerable" and v["factual_score"] is not None]
    assert refusals and all(v["language_score"] is None for v in refusals)
    assert answers and all(v["language_score"] == 5 for v in answers)
    assert len(language_judged) == len(answers)
