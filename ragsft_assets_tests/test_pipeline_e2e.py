"""The whole graph on the sample snapshot: with the oracle double (every stage keeps rows, exact
bookkeeping, byte-identical reruns) and once with the real embedded model (the run completes and
the funnel adds up, whatever few questions a 135M model gets through)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
from ragsft_assets.definitions import build_definitions
from ragsft_assets.ids import sha256_hex
from ragsft_assets.release.verify import verify_release
from ragsft_assets.resources.catalog import CatalogResource
from ragsft_assets.resources.embedder import EmbeddingResource
from ragsft_assets.resources.snapshots import SnapshotSource
from ragsft_assets.resources.store import ArtifactStore
from ragsft_assets_tests.llm_double import ScriptedChatModel
from ragsft_assets_tests.oracle_double import Oracle

KEY = "sample.fr"
FILTERED_PARENTS = {"filtered": "default", "filtered_qwen": "default", "filtered_qwen_v2": "filtered_qwen"}
FR_SFT = "hotpotqa_fr_abstracts_v2"
FILTER_ASSETS = (
    "multihop_filtered",
    "multihop_filtered_qwen",
    "multihop_filtered_qwen_v2",
)  # the French snapshot's RAG SFT config (issue 12)

# Which filter a question fails, from its text alone (a hash), so that the test knows the expected
# drops independently of the run: criteria_annotation (a criterion fails, or an unreadable reply:
# not_annotated), bridge_judge, language_judge. The others pass every filter, as the oracle does.
FAILS = {0: "clear_question", 1: "not_annotated", 2: "bridge_judge", 3: "language_judge"}
_QUESTION = re.compile(r"Question ?: (.+)")


def fails_at(question: str) -> str | None:
    return FAILS.get(int(sha256_hex(question.strip())[:8], 16) % 7)


class FilterFailingOracle(Oracle):
    """The oracle, but the questions ``fails_at`` names fail their filter (test-local double)."""

    def __call__(self, messages) -> str:
        text = "\n".join(m["content"] for m in messages)
        found = _QUESTION.findall(text)
        fails = fails_at(found[-1]) if found else None
        reply = super().__call__(messages)
        if '"minimal_answer"' in text and fails == "not_annotated":
            return "je ne sais pas"  # not the six booleans: the question stays not_annotated
        if '"minimal_answer"' in text and fails == "clear_question":
            return reply.replace('"clear_question":true', '"clear_question":false')
        if '"b_only_candidate"' in text and fails == "bridge_judge":
            return reply.replace('"b_only_candidate":true', '"b_only_candidate":false')
        if '"no_meta_wording"' in text and fails == "language_judge":
            return reply.replace('"no_meta_wording":true', '"no_meta_wording":false')
        return reply


def filter_failing_model() -> ScriptedChatModel:
    return ScriptedChatModel(FilterFailingOracle(), model_id="oracle-double")


def snapshot_resources(home: Path, model: object, store: ArtifactStore | None = None) -> dict[str, object]:
    """The snapshot jobs' resources over ``home``, every LLM role played by ``model``."""
    return {
        "store": store or ArtifactStore(home=str(home)),
        "snapshots": SnapshotSource(home=str(home)),
        "catalog": CatalogResource(home=str(home)),
        "generator": model,
        "judge": model,
        "annotator": model,
        "base_model": model,
        "embedder": EmbeddingResource(cache_dir=str(home / "llm_cache")),  # bound; full_job embeds nothing
    }


def run_full_job(home: Path, model: object, run_config: dict | None = None) -> dg.ExecuteInProcessResult:
    install_snapshot(KEY, sample_folder(), home)
    defs = build_definitions(snapshot_resources(home, model))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [KEY])
    return defs.resolve_job_def("full_job").execute_in_process(
        partition_key=KEY, instance=instance, run_config=run_config or {}
    )


def ledger(home: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW ledger AS SELECT * FROM read_parquet('{home}/assets/{KEY}/_ledger/*.parquet')")
    return con


def rows(home: Path, asset: str) -> int:
    return ArtifactStore(home=str(home)).read(KEY, asset).num_rows


@pytest.fixture(scope="module")
def oracle_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("oracle_home")
    result = run_full_job(home, filter_failing_model())
    assert result.success
    return home


def test_every_stage_keeps_rows(oracle_home: Path) -> None:
    for asset in ("abstracts", "link_graph", "bridge_pairs", "question_drafts", "distractors"):
        assert rows(oracle_home, asset) > 0, asset
    assert rows(oracle_home, "multihop_questions") > 0
    assert rows(oracle_home, "rag_sft") > 0


def test_funnel_adds_up_in_the_ledger(oracle_home: Path) -> None:
    con = ledger(oracle_home)
    drafted = con.execute(
        "SELECT count(*) FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept'"
    ).fetchone()[0]
    decided_later = con.execute(
        "SELECT count(DISTINCT candidate_id) FROM ledger WHERE product = 'multihop' "
        "AND stage NOT IN ('question_drafts') AND candidate_id IN "
        "(SELECT candidate_id FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept')"
    ).fetchone()[0]
    assert drafted > 0 and decided_later == drafted  # every drafted question was decided downstream
    kept = set(ArtifactStore(home=str(oracle_home)).read(KEY, "multihop_questions")["id"].to_pylist())
    dropped_after = {
        r[0]
        for r in con.execute(
            "SELECT candidate_id FROM ledger WHERE product = 'multihop' AND verdict <> 'kept'"
        ).fetchall()
    }
    assert kept and not (kept & dropped_after)  # a released question was never dropped


def test_release_verifies_and_loads(oracle_home: Path) -> None:
    from datasets import load_dataset

    folder = oracle_home / "releases" / KEY
    assert verify_release(folder).ok
    loaded = {}
    for config in ("default", "corpus", FR_SFT, *FILTERED_PARENTS, "corpus_filtered_qwen_v2"):
        loaded[config] = ds = load_dataset(str(folder), config)
        assert sum(len(split) for split in ds.values()) > 0, config
    # issue 13: every filtered config is a subset of the config it filters, row for row, with its
    # filters' verdicts in its provenance folder; filtered_qwen "n'est pas un sous-ensemble de la
    # configuration par défaut [...] Pour ces identifiants communs le contenu est identique à l'octet
    # près" (001): its rows that share an `_id` with default are default's rows
    for config, parent in FILTERED_PARENTS.items():
        assert (folder / "provenance" / config / "verdicts.parquet").is_file(), config
        for split, rows in loaded[config].items():
            by_id = {r["_id"]: r for r in loaded[parent][split]}
            if config == "filtered_qwen":
                assert all(by_id.get(r["_id"], r) == r for r in rows), (config, split)
            else:
                assert all(by_id.get(r["_id"]) == r for r in rows), (config, split)


# The HotpotQA-fr card's Schéma (001), field, type, in its order.
CARD_SCHEMA = """_id	string	identifiant hexadécimal de 24 caractères
question	string	la question
answer	string	réponse extractive, reprise verbatim d'un document gold
supporting_facts	list[[title, sent_id]]	phrases justificatives
context	list[[title, list[sentence]]]	10 paragraphes, mélangés
type	string	toujours bridge
level	string	toujours hard, voir Limites"""


def test_hotpotqa_fr_configs_have_the_cards_schema(oracle_home: Path) -> None:
    """default, filtered, filtered_qwen and filtered_qwen_v2 of a release built with the oracle:
    the card's fields in its order, `_id` of 24 hex characters, the nested pairs in the HF layout
    (Parquet cannot mix a title and an int in one list: ``{title: [...], sent_id: [...]}``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragsft_assets.release import layout

    folder = oracle_home / "releases" / KEY
    files = layout.release_files(folder)
    fields = [line.split("\t")[0] for line in CARD_SCHEMA.splitlines()]
    for config in ("default", *FILTERED_PARENTS):
        for rel in files[config].values():
            t = pq.read_table(folder / rel)
            assert t.column_names == fields, config
            assert all(t.schema.field(f).type == pa.string() for f in ("_id", "question", "answer", "type"))
            assert all(re.fullmatch(r"[0-9a-f]{24}", i) for i in t["_id"].to_pylist()), config
            assert set(t["type"].to_pylist()) == {"bridge"} and set(t["level"].to_pylist()) == {"hard"}
            sf = t.schema.field("supporting_facts").type
            assert [f.name for f in sf] == ["title", "sent_id"], config
            assert all(len(c["title"]) == 10 for c in t["context"].to_pylist()), config


def test_rerun_gives_identical_bytes(oracle_home: Path, tmp_path: Path) -> None:
    assert run_full_job(tmp_path, filter_failing_model()).success
    for asset in ("multihop_questions", *FILTER_ASSETS, "rag_sft", "_ledger"):
        a = sorted((oracle_home / "assets" / KEY / asset).glob("*.parquet"))
        b = sorted((tmp_path / "assets" / KEY / asset).glob("*.parquet"))
        assert [p.name for p in a] == [p.name for p in b]
        for x, y in zip(a, b, strict=True):
            assert x.read_bytes() == y.read_bytes(), x


@pytest.mark.integration
def test_full_job_with_the_embedded_model() -> None:
    """The session's one real `ragsft demo` (demo_run: the README's test reads it too)."""
    from ragsft_assets_tests.demo_run import shared_demo_run

    run = shared_demo_run()  # full_job with the embedded model, at the sample's size; it succeeded
    home = run.home
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    event = instance.get_latest_materialization_event(dg.AssetKey("question_drafts"))
    assert event is not None and event.asset_materialization is not None
    md = event.asset_materialization.metadata
    # the engine really answered (a broken engine errors every call, and every slot is still ledgered)
    assert md["generator/errors"].value == 0 and md["generator/completion_tokens"].value > 0
    con = ledger(home)
    drafts = con.execute("SELECT count(*) FROM ledger WHERE stage = 'question_drafts'").fetchone()[0]
    assert drafts == rows(home, "bridge_pairs") * 3  # every draft slot of the pairs has a ledger row
    # Each slot exactly once (a duplicated or lost slot fails), and the kept ones are the drafts
    # that reached the next stage: two independent counts, not the same rows summed twice.
    slots = con.execute(
        "SELECT count(DISTINCT candidate_id) FROM ledger WHERE stage = 'question_drafts'"
    ).fetchone()[0]
    assert slots == drafts
    kept = con.execute(
        "SELECT count(*) FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept'"
    ).fetchone()[0]
    downstream = con.execute(
        "SELECT count(DISTINCT candidate_id) FROM ledger WHERE product = 'multihop' "
        "AND stage NOT IN ('question_drafts') AND candidate_id IN "
        "(SELECT candidate_id FROM ledger WHERE stage = 'question_drafts' AND verdict = 'kept')"
    ).fetchone()[0]
    assert downstream == kept  # every kept draft was decided downstream, the others never reached it
    assert verify_release(home / "releases" / KEY).ok


def _ids(home: Path, asset: str, split: str | None = None) -> set[str]:
    return set(ArtifactStore(home=str(home)).read(KEY, asset, split)["id"].to_pylist())


def test_each_filter_drops_exactly_its_failing_questions(oracle_home: Path) -> None:
    """Issue 13: the funnel adds up at each filter and each config drops the questions made to fail."""
    import pyarrow.parquet as pq

    from ragsft_assets.multihop.filter_configs import subset_violations

    store = ArtifactStore(home=str(oracle_home))
    questions = store.read(KEY, "multihop_questions").select(["id", "question"]).to_pylist()
    by_fail: dict[str | None, set[str]] = {}
    for q in questions:
        by_fail.setdefault(fails_at(q["question"]), set()).add(q["id"])
    assert all(by_fail.get(f) for f in FAILS.values()), {f: len(by_fail.get(f, ())) for f in FAILS.values()}
    everyone = {q["id"] for q in questions}
    crit = store.read(KEY, "criteria_annotation").to_pylist()
    counts = Counter(r["verdict"] for r in crit)
    # in = kept + rejected + not_annotated, and each group is exactly the questions made so
    assert len(crit) == len(everyone) == counts["kept"] + counts["fails_criteria"] + counts["not_annotated"]
    assert {r["id"] for r in crit if r["verdict"] == "not_annotated"} == by_fail["not_annotated"]
    assert {r["id"] for r in crit if r["verdict"] == "fails_criteria"} == by_fail["clear_question"]
    assert all(r["failed"] == ["clear_question"] for r in crit if r["verdict"] == "fails_criteria")
    qwen = everyone - by_fail["not_annotated"] - by_fail["clear_question"]
    assert _ids(oracle_home, "multihop_filtered_qwen") == qwen
    bridge = store.read(KEY, "bridge_judge").to_pylist()
    assert {r["id"] for r in bridge} == qwen  # the judge saw exactly filtered_qwen
    assert {r["id"] for r in bridge if r["verdict"] != "kept"} == by_fail["bridge_judge"]
    lang = store.read(KEY, "language_judge").to_pylist()
    assert {r["id"] for r in lang} == qwen - by_fail["bridge_judge"]
    assert {r["id"] for r in lang if r["verdict"] != "kept"} == by_fail["language_judge"]
    v2 = qwen - by_fail["bridge_judge"] - by_fail["language_judge"]
    assert _ids(oracle_home, "multihop_filtered_qwen_v2") == v2 and v2 < qwen < everyone  # strict subsets
    for child, parent in (("multihop_filtered_qwen", "multihop_questions"),
                          ("multihop_filtered_qwen_v2", "multihop_filtered_qwen")):  # fmt: skip
        for split in ("train", "validation", "test"):
            assert subset_violations(store.read(KEY, child, split), store.read(KEY, parent, split)) == []
    # provenance names the failing judge, criterion by criterion for the six criteria
    folder = oracle_home / "releases" / KEY / "provenance" / "filtered_qwen_v2"
    prov = pq.read_table(folder / "verdicts.parquet").to_pylist()
    failed = {(r["id"], r["filter"]) for r in prov if not r["kept"]}
    assert {i for i, f in failed if f == "criteria_annotation/clear_question"} == by_fail["clear_question"]
    assert {i for i, f in failed if f == "bridge_judge"} == by_fail["bridge_judge"]
    assert {i for i, f in failed if f == "language_judge"} == by_fail["language_judge"]
    assert {i for i, f in failed if f == "criteria_annotation"} == by_fail["clear_question"] | by_fail[
        "not_annotated"
    ]
    assert {f for _, f in failed} == {
        "criteria_annotation", "criteria_annotation/clear_question", "bridge_judge", "language_judge"
    }  # fmt: skip


def test_french_release_ships_hotpotqa_fr_abstracts_v2_from_filtered_qwen_v2(oracle_home: Path) -> None:
    """Issue 12: the French RAG SFT config, one split `train`, built on filtered_qwen_v2's train split,
    with the QA card's RAG SFT statistics on the snapshot card."""
    from ragsft_assets.release import layout

    store = ArtifactStore(home=str(oracle_home))
    folder = oracle_home / "releases" / KEY
    files = layout.release_files(folder)
    assert "hotpotqa_cite" not in files and list(files[FR_SFT]) == ["train"]
    prompts = store.read(KEY, "rag_prompts").to_pylist()
    asked = {p["question_id"] for p in prompts}
    train_v2 = _ids(oracle_home, "multihop_filtered_qwen_v2", "train")
    assert asked and asked <= train_v2  # nothing from another config or split
    over = {
        r[0]
        for r in ledger(oracle_home)
        .execute("SELECT candidate_id FROM ledger WHERE stage = 'rag_prompts' AND verdict <> 'kept'")
        .fetchall()
    }
    assert asked | (over & train_v2) == train_v2  # every train question of v2 is asked or over budget
    assert {p["split"] for p in prompts} == {"train"}
    card = (folder / "README.md").read_text(encoding="utf-8")
    section = card.split(f"### `{FR_SFT}`: citations and answers")[1]
    assert "documents per prompt" in section and "refusal words (median, p90)" in section
    assert "most frequent first sentence" in section.lower()


def test_release_config_names_are_configurable(oracle_home: Path, tmp_path: Path) -> None:
    """Issue 13: filtered config names from the release's run config; defaults are the card's."""
    import shutil

    from datasets import load_dataset

    from ragsft_assets.defs.release.assets import dataset_card, release, release_manifest
    from ragsft_assets.release import layout

    home = tmp_path / "home"
    shutil.copytree(oracle_home / "assets", home / "assets")
    shutil.copytree(oracle_home / "snapshots", home / "snapshots")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("snapshot", [KEY])
    names = {"filtered_qwen": "qwen_all_six", "filtered_qwen_v2": "qwen_v2b", "rag_sft": "fr_cite"}
    result = dg.materialize(
        [release, dataset_card, release_manifest, dg.AssetSpec("multihop_audit"),
         *(dg.AssetSpec(a) for a in {c.asset for c in layout.RELEASE_CONFIGS})],
        resources={"store": ArtifactStore(home=str(home))},
        partition_key=KEY,
        instance=instance,
        run_config={"ops": {"release": {"config": names}}},
        selection=[release.key, dataset_card.key, release_manifest.key],
    )  # fmt: skip
    assert result.success
    folder = home / "releases" / KEY
    files = layout.release_files(folder)
    assert {"qwen_all_six", "qwen_v2b", "fr_cite", "filtered"} <= set(files)
    assert not {"filtered_qwen", "filtered_qwen_v2", FR_SFT} & set(files)
    assert verify_release(folder).ok
    original = oracle_home / "releases" / KEY
    for new, old in (
        ("qwen_all_six", "filtered_qwen"),
        ("qwen_v2b", "filtered_qwen_v2"),
        ("fr_cite", FR_SFT),
    ):
        for split, rel in files[new].items():  # the same bytes under the new name
            assert (folder / rel).read_bytes() == (original / layout.data_file(old, split)).read_bytes()
    assert sum(len(s) for s in load_dataset(str(folder), "qwen_v2b").values()) == len(
        _ids(oracle_home, "multihop_filtered_qwen_v2")
    )
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "### `qwen_v2b`: verdicts of each filter" in card and "publishability score" in card
    assert "the bridge judge and then the language judge keep" in card and "rows of `qwen_all_six`" in card
    assert "### `fr_cite`: citations and answers" in card
    assert (folder / "provenance" / "qwen_v2b" / "verdicts.parquet").is_file()
    with pytest.raises(ValueError, match="two release configs would be named"):
        layout.release_configs({"filtered": "corpus"})
    with pytest.raises(ValueError, match="no release config named"):
        layout.release_configs({"filtred": "x"})
    with pytest.raises(ValueError, match="is not a config name"):
        layout.release_configs({"filtered": "a/b"})
